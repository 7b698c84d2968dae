#pragma once

/// \file collective_observer.hpp
/// Watching the collectives of a process group: what each one is, when it
/// started, and when and how it ended. The timeline and the flight recorder
/// are observers; so can a program's own statistics be.
///
/// \code
///   class Bytes final : public ddp::CollectiveObserver {
///    public:
///     std::unique_ptr<ddp::ObservedCollective> on_started(
///         const ddp::CollectiveFacts& facts) override {
///       total += facts.bytes;
///       return nullptr;  // no need to hear of its end
///     }
///     std::atomic<int64_t> total{0};
///   };
///   group->add_observer(std::make_shared<Bytes>());
/// \endcode
///
/// Note [When a collective ends]
/// A collective ends for its observers when its Work's first wait() returns
/// or throws, on the waiting thread: that is when its result is in place
/// (and when NCCL's or Gloo's errors surface), not when the issuing call
/// returned. A Work destroyed without a wait() ends at its destruction, with
/// CollectiveOutcome::waited false; a collective the backend refused to issue
/// ends at once, with CollectiveOutcome::issued false. Each ObservedCollective
/// hears of the end exactly once.

#include <c10/core/ScalarType.h>

#include <chrono>
#include <cstdint>
#include <exception>
#include <memory>
#include <optional>

#include "ddp/comm/reduce_op.hpp"

namespace ddp::comm {

/// What a collective is and when it started, as its observers see it.
struct CollectiveFacts {
  /// "all_reduce", "broadcast", "all_gather", "reduce_scatter" or "barrier"
  /// (a string literal, valid for the life of the process).
  const char* name = "";
  /// The reduction, for all_reduce and reduce_scatter.
  std::optional<ReduceOp> reduce_op;
  /// The root rank, for broadcast; -1 for the others.
  int root = -1;
  /// The input tensor's dtype; none for a barrier.
  std::optional<c10::ScalarType> dtype;
  /// Elements of the input tensor (0 for a barrier).
  int64_t numel = 0;
  /// Bytes of the input tensor (0 for a barrier).
  int64_t bytes = 0;
  /// When the observers were told, just before the backend saw it: the wall
  /// clock, comparable between ranks.
  std::chrono::system_clock::time_point start_time;
  /// The same moment on the monotonic clock, which CollectiveOutcome's
  /// duration is measured on.
  std::chrono::steady_clock::time_point steady_start_time;
};

/// How and when a collective ended (Note [When a collective ends]).
struct CollectiveOutcome {
  /// What issuing it or its wait() threw (a ddp::Error, TimeoutError for a
  /// timeout); null when it completed or was never waited on.
  std::exception_ptr error;
  /// False when the backend refused to issue it: it never ran.
  bool issued = true;
  /// False when its Work was destroyed without a wait() (or it was never
  /// issued): whether it succeeded is not known.
  bool waited = true;
  /// When it ended, on the wall clock: CollectiveFacts::start_time plus
  /// the duration.
  std::chrono::system_clock::time_point finish_time;
  /// From CollectiveFacts::steady_start_time to the end.
  std::chrono::steady_clock::duration duration{0};
};

/// One collective as one observer follows it: what
/// CollectiveObserver::on_started() returns, holding whatever the observer
/// keeps until the end (a ticket, a lane, a counter), and told that end.
class ObservedCollective {
 public:
  virtual ~ObservedCollective() = default;
  /// Called once when the collective has ended (Note [When a collective
  /// ends]), on the thread that waited on its Work, destroyed it or issued
  /// it; `facts` are those on_started() was given.
  virtual void on_finished(const CollectiveFacts& facts,
                           const CollectiveOutcome& outcome) noexcept = 0;
};

/// Hears of the collectives issued through the public methods of the
/// groups it is added to (ProcessGroup::add_observer()). One observer may
/// watch several groups, from several threads at once: it synchronizes
/// what it shares.
class CollectiveObserver {
 public:
  virtual ~CollectiveObserver() = default;
  /// Called on the issuing thread after the arguments were checked, before
  /// the backend sees the collective. Returns what is to be told of its end,
  /// or null to hear no more of it (then nothing waits on its Work for this
  /// observer). An exception fails the collective before it is issued: the
  /// observers already told hear that it never ran.
  virtual std::unique_ptr<ObservedCollective> on_started(const CollectiveFacts& facts) = 0;
};

}  // namespace ddp::comm

namespace ddp {
using namespace comm;  // Note [One namespace per layer] in ddp/ddp.hpp
}  // namespace ddp

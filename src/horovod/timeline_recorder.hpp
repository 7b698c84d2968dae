#pragma once

// Internal: how ddp::ProcessGroup records its collectives into the timeline
// (ddp/timeline.hpp), and how library code names them.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "ddp/process_group.hpp"
#include "ddp/timeline.hpp"
#include "ddp/work.hpp"

namespace ddp::timeline::detail {

/// What a collective is, as the timeline shows it.
struct CollectiveFacts {
  const char* op = "";                 ///< "allReduce", "broadcast", ...
  std::optional<ReduceOp> reduce;      ///< The reduction, for reducing ops.
  int root = -1;                       ///< The root, for a broadcast.
  const at::Tensor* tensor = nullptr;  ///< The input; null for a barrier.
};

/// Names collectives like timeline::NameScope, without allocating: `label`
/// must outlive the scope (a string literal), and the name is "label index"
/// (or "label" when index is negative).
///
/// Note [Fallback names]
/// A generic helper (broadcastCoalesced) cannot know what it is broadcasting
/// for. Its scope is a fallback: it names a collective only when no other
/// scope is active, so hvd::broadcast_parameters' name wins over it while
/// DistributedDataParallel's own broadcasts still get a name.
class LabelScope {
 public:
  explicit LabelScope(const char* label, int64_t index = -1, bool fallback = false);
  ~LabelScope();
  LabelScope(const LabelScope&) = delete;
  LabelScope& operator=(const LabelScope&) = delete;
};

/// The name the innermost scope of this thread gives a collective (see
/// Note [Fallback names]); none outside every scope.
std::optional<std::string> currentScopeName();

/// Counts this thread's nested ProcessGroup calls.
///
/// Note [Recording only the outermost call]
/// An engine may hand a collective on to another engine's public method
/// (`auto` calls Gloo's allReduceAsync). Only the call that the user (or
/// ddp's own code) made is recorded; the nested one runs with depth > 1.
/// An engine that makes such nested calls from a thread of its own (a
/// serial executor) holds a CallDepth on that thread while it runs the
/// task, for the same effect.
class CallDepth {
 public:
  CallDepth() noexcept;
  ~CallDepth();
  CallDepth(const CallDepth&) = delete;
  CallDepth& operator=(const CallDepth&) = delete;
  /// True for the first ProcessGroup call on this thread's stack.
  bool outermost() const noexcept;
};

/// A recorded collective that has started and not yet been written.
class PendingEvent;

/// Starts an event for `facts` (null when no timeline is recorded).
std::shared_ptr<PendingEvent> beginEvent(const CollectiveFacts& facts);
/// Drops an event whose collective could not be issued.
void cancelEvent(PendingEvent& event) noexcept;
/// A Work that writes `event` once `work` has been waited on (or, if it
/// never is, when the Work is destroyed).
Work endWhenDone(Work work, std::shared_ptr<PendingEvent> event);

/// Issues a collective through `issue` and records it when this is the
/// outermost ProcessGroup call and a timeline is recorded.
template <typename Issue>
Work recordCollective(const CollectiveFacts& facts, Issue&& issue) {
  CallDepth depth;
  if (!depth.outermost() || !recording()) return issue();
  std::shared_ptr<PendingEvent> event = beginEvent(facts);
  if (!event) return issue();
  Work work;
  try {
    work = issue();
  } catch (...) {
    cancelEvent(*event);
    throw;
  }
  return endWhenDone(std::move(work), std::move(event));
}

/// Starts the timeline named by DDP_TIMELINE in the captured environment,
/// as `rank`, the first time a process group is made; later calls do
/// nothing. \throws ConfigError when the file cannot be created.
void startFromEnvironmentOnce(int rank);

/// start() for a rank rather than a group.
void startForRank(const TimelineOptions& options, int rank);

}  // namespace ddp::timeline::detail

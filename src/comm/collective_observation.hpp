#pragma once

// Internal: one collective as the observers of its group follow it, from
// the call that issues it to the end of its Work (Note [Observing
// collectives] in ddp/comm/process_group.hpp, Note [When a collective ends] in
// ddp/comm/collective_observer.hpp).

#include <ATen/core/Tensor.h>
#include <c10/macros/Macros.h>
#include <c10/util/SmallVector.h>

#include <exception>
#include <memory>
#include <optional>
#include <vector>

#include "ddp/comm/collective_observer.hpp"
#include "ddp/comm/work.hpp"

namespace ddp::comm::detail {

/// The facts of collective `name` on `tensor` (undefined for a barrier),
/// starting now.
CollectiveFacts collective_facts(const char* name, const at::Tensor& tensor,
                                 std::optional<ReduceOp> reduce_op = std::nullopt, int root = -1);

/// What the observers that asked to hear of a collective's end got back
/// from on_started(); ends it for them once.
class CollectiveObservation {
 public:
  /// Tells `observers`, in order, that the collective of `facts` starts. If
  /// one throws, those already told hear that it never ran, and the
  /// exception propagates.
  CollectiveObservation(const std::vector<std::shared_ptr<CollectiveObserver>>& observers,
                        const CollectiveFacts& facts);
  /// Ends it as never waited on, unless it has ended already.
  ~CollectiveObservation();
  /// Takes over `other`'s followers; `other` is left with none.
  CollectiveObservation(CollectiveObservation&& other) noexcept;
  CollectiveObservation(const CollectiveObservation&) = delete;
  CollectiveObservation& operator=(const CollectiveObservation&) = delete;
  CollectiveObservation& operator=(CollectiveObservation&&) = delete;

  /// Whether any observer wants to hear of the end.
  bool wanted() const noexcept { return !followers_.empty(); }
  /// Tells the followers, in the reverse order, how it ended; only the first
  /// call counts.
  void end(std::exception_ptr error, bool issued, bool waited) noexcept;

 private:
  CollectiveFacts facts_;
  // Inline room for init()'s two observers (the flight recorder, the
  // timeline): no allocation for the list itself.
  c10::SmallVector<std::unique_ptr<ObservedCollective>, 2> followers_;
  bool ended_ = false;
};

/// Tells `observers` (not empty) about collective `name` on `tensor`
/// (undefined for a barrier), which `issue` hands to the backend, and
/// returns its Work, which ends it for them when waited on (or destroyed).
/// An error of `issue` ends it as never issued and propagates. Out of line,
/// so that the caller's path without observers stays a check and a call.
template <typename Issue>
C10_NOINLINE Work observe_collective(
    const std::vector<std::shared_ptr<CollectiveObserver>>& observers, const char* name,
    const at::Tensor& tensor, std::optional<ReduceOp> reduce_op, int root, Issue issue) {
  CollectiveObservation observation(observers, collective_facts(name, tensor, reduce_op, root));
  if (!observation.wanted()) return issue();
  Work work;
  try {
    work = issue();
  } catch (...) {
    observation.end(std::current_exception(), /*issued=*/false, /*waited=*/false);
    throw;
  }
  return observed(work, std::move(observation));
}

}  // namespace ddp::comm::detail

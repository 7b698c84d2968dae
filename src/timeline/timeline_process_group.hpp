#pragma once

// Internal: the timeline as a ProcessGroup decorator.
//
// Note [The timeline at the edge]
// The timeline observes collectives from outside: init() wraps the group it
// returns in a TimelineProcessGroup, which hands every collective to the
// wrapped engine (through ProcessGroup's forwarders, Note [Decorators], so
// that arguments are validated once) and, while a timeline is being
// recorded, records it. The wrapper costs one virtual call and one atomic
// load per collective when nothing is recorded; init() always applies it so
// that timeline::start() works on any group init() made. The engines,
// DistributedDataParallel and the Horovod-style optimizer know nothing of
// it; they only name what they issue (collective_name.hpp). A collective is
// recorded once however many engines it passes through (`auto` hands it to
// Gloo or NCCL, the hierarchical engine to its leaders' Gloo), because only
// the outermost group, the one the caller holds, is the decorator: no
// thread-local call depth is needed, and an engine's worker thread needs no
// special care.

#include <ATen/core/Tensor.h>

#include <memory>
#include <optional>
#include <string>

#include "ddp/environment.hpp"
#include "ddp/process_group.hpp"
#include "ddp/work.hpp"

namespace ddp::timeline::detail {

/// What a collective is, as the timeline shows it.
struct CollectiveFacts {
  const char* op = "";                 ///< "all_reduce", "broadcast", ...
  std::optional<ReduceOp> reduce;      ///< The reduction, for reducing ops.
  int root = -1;                       ///< The root, for a broadcast.
  const at::Tensor* tensor = nullptr;  ///< The input; null for a barrier.
};

/// A recorded collective that has started and not yet been written.
class PendingEvent;

/// Starts an event for `facts`, named by the current collective name (null
/// when no timeline is recorded).
std::shared_ptr<PendingEvent> beginEvent(const CollectiveFacts& facts);
/// Drops an event whose collective could not be issued.
void cancelEvent(PendingEvent& event) noexcept;
/// A Work that writes `event` once `work` has been waited on (or, if it
/// never is, when the Work is destroyed).
Work endWhenDone(Work work, std::shared_ptr<PendingEvent> event);

/// Starts the timeline named by DDP_TIMELINE in `env`, as `rank`, the first
/// time it is called in the process; later calls do nothing.
/// \throws IoError when the file cannot be created.
void startFromEnvironmentOnce(const EnvironmentMap& env, int rank);

/// Records the collectives of the group it wraps (Note [The timeline at
/// the edge]).
class TimelineProcessGroup final : public ProcessGroup {
 public:
  explicit TimelineProcessGroup(std::shared_ptr<ProcessGroup> inner);

  std::string backend_name() const override { return inner_->backend_name(); }
  /// The wrapped engine.
  const std::shared_ptr<ProcessGroup>& inner() const noexcept { return inner_; }

 protected:
  Work do_all_reduce(const at::Tensor& tensor, ReduceOp op) override;
  Work do_broadcast(const at::Tensor& tensor, int root) override;
  Work do_all_gather(const at::Tensor& output, const at::Tensor& input) override;
  Work do_reduce_scatter(const at::Tensor& output, const at::Tensor& input, ReduceOp op) override;
  Work do_barrier() override;

 private:
  std::shared_ptr<ProcessGroup> inner_;
};

}  // namespace ddp::timeline::detail

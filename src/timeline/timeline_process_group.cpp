#include "timeline/timeline_process_group.hpp"

#include "ddp/errors.hpp"
#include "ddp/timeline.hpp"

namespace ddp::timeline {
namespace detail {
namespace {

// Issues a collective through `issue` and, while a timeline is recorded,
// records it.
template <typename Issue>
Work record(const CollectiveFacts& facts, Issue&& issue) {
  if (!recording()) return issue();
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

}  // namespace

TimelineProcessGroup::TimelineProcessGroup(std::shared_ptr<ProcessGroup> inner)
    : ProcessGroup(inner->topology(), inner->collectiveTimeout()), inner_(std::move(inner)) {}

Work TimelineProcessGroup::doAllReduce(const at::Tensor& tensor, ReduceOp op) {
  return record({"allReduce", op, -1, &tensor}, [&] { return inner_->allReduceAsync(tensor, op); });
}

Work TimelineProcessGroup::doBroadcast(const at::Tensor& tensor, int root) {
  return record({"broadcast", std::nullopt, root, &tensor},
                [&] { return inner_->broadcastAsync(tensor, root); });
}

Work TimelineProcessGroup::doAllGather(const at::Tensor& output, const at::Tensor& input) {
  return record({"allGather", std::nullopt, -1, &input},
                [&] { return inner_->allGatherAsync(output, input); });
}

Work TimelineProcessGroup::doReduceScatter(const at::Tensor& output, const at::Tensor& input,
                                           ReduceOp op) {
  return record({"reduceScatter", op, -1, &input},
                [&] { return inner_->reduceScatterAsync(output, input, op); });
}

Work TimelineProcessGroup::doBarrier() {
  return record({"barrier", std::nullopt, -1, nullptr}, [&] { return inner_->barrierAsync(); });
}

}  // namespace detail

std::shared_ptr<ProcessGroup> recorded(std::shared_ptr<ProcessGroup> group) {
  if (!group) {
    throw InvalidArgumentError("timeline::recorded: the group is null; pass the group that "
                               "ddp::init() or a backend returned.");
  }
  if (std::dynamic_pointer_cast<detail::TimelineProcessGroup>(group)) return group;
  return std::make_shared<detail::TimelineProcessGroup>(std::move(group));
}

}  // namespace ddp::timeline

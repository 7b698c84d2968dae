#include "timeline/timeline_process_group.hpp"

#include "ddp/errors.hpp"
#include "ddp/timeline/timeline.hpp"

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
    : ProcessGroup(inner->topology(), inner->collective_timeout()), inner_(std::move(inner)) {}

Work TimelineProcessGroup::do_all_reduce(const at::Tensor& tensor, ReduceOp op) {
  return record({"all_reduce", op, -1, &tensor},
                [&] { return forward_all_reduce(*inner_, tensor, op); });
}

Work TimelineProcessGroup::do_broadcast(const at::Tensor& tensor, int root) {
  return record({"broadcast", std::nullopt, root, &tensor},
                [&] { return forward_broadcast(*inner_, tensor, root); });
}

Work TimelineProcessGroup::do_all_gather(const at::Tensor& output, const at::Tensor& input) {
  return record({"all_gather", std::nullopt, -1, &input},
                [&] { return forward_all_gather(*inner_, output, input); });
}

Work TimelineProcessGroup::do_reduce_scatter(const at::Tensor& output, const at::Tensor& input,
                                             ReduceOp op) {
  return record({"reduce_scatter", op, -1, &input},
                [&] { return forward_reduce_scatter(*inner_, output, input, op); });
}

Work TimelineProcessGroup::do_barrier() {
  return record({"barrier", std::nullopt, -1, nullptr}, [&] { return forward_barrier(*inner_); });
}

}  // namespace detail

std::shared_ptr<ProcessGroup> recorded(std::shared_ptr<ProcessGroup> group) {
  if (!group) {
    throw InvalidArgumentError(
        "timeline::recorded: the group is null; pass the group that "
        "ddp::init() or a backend returned.");
  }
  if (std::dynamic_pointer_cast<detail::TimelineProcessGroup>(group)) return group;
  return std::make_shared<detail::TimelineProcessGroup>(std::move(group));
}

}  // namespace ddp::timeline

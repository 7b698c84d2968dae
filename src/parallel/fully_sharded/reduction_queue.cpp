#include "parallel/fully_sharded/reduction_queue.hpp"

#include <algorithm>

namespace ddp::parallel::detail {

ReductionQueue::ReductionQueue(const std::vector<std::unique_ptr<ShardedUnit>>& units,
                               const ForwardOrder& order)
    : units_(units), order_(order), ready_(units.size(), 0) {
  reset();
}

void ReductionQueue::ready(int unit) {
  ready_[unit] = 1;
  // Strictly in reverse forward order, so that every rank launches in the
  // same order (without find_unused_units every rank runs every unit).
  while (next_ >= 0) {
    const int next = order_.at(next_);
    if (!ready_[next] && units_[next]->trainable()) break;
    launch(next);
    --next_;
  }
}

void ReductionQueue::launch(int unit) {
  ShardedUnit& u = *units_[unit];
  // A frozen unit is resharded at the end of backward: its backward, which
  // reads its parameters, may come after the units before it are reduced.
  if (!u.trainable()) return;
  // One reduction in flight, also for units reduced one after another with
  // no unit's backward between them (at the end of backward).
  finish_in_flight();
  u.reshard();  // before the reduction's buffers are allocated
  u.reduce_async();
  in_flight_ = unit;
}

void ReductionQueue::finish_in_flight() {
  if (in_flight_ < 0) return;
  // Note [Hybrid sharding]: the all-reduce across the replicas started by
  // the reduction before ends first; this one's starts, and runs on.
  finish_replicating();
  ShardedUnit& u = *units_[in_flight_];
  u.finish_scatter();
  if (u.replicating()) {
    replicating_ = in_flight_;
  } else {
    u.finish_reduction();
  }
  in_flight_ = -1;
}

void ReductionQueue::finish_replicating() {
  if (replicating_ >= 0) units_[replicating_]->finish_reduction();
  replicating_ = -1;
}

void ReductionQueue::finish(const std::function<bool(int)>& unused) {
  for (; next_ >= 0; --next_) {
    const int unit = order_.at(next_);
    if (units_[unit]->trainable() && unused(unit)) {
      units_[unit]->reshard();  // its shard's gradient stays untouched
    } else {
      launch(unit);
    }
  }
  finish_in_flight();
  finish_replicating();
}

void ReductionQueue::reset() {
  std::fill(ready_.begin(), ready_.end(), 0);
  next_ = static_cast<int>(units_.size()) - 1;
  in_flight_ = -1;
  replicating_ = -1;
}

}  // namespace ddp::parallel::detail

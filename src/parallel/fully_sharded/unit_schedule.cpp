#include "parallel/fully_sharded/unit_schedule.hpp"

#include <torch/torch.h>

#include <algorithm>

#include "base/compat/torch_compat.hpp"
#include "ddp/comm/process_group.hpp"

namespace ddp::parallel::detail {

UnitSchedule::UnitSchedule(std::vector<std::unique_ptr<ShardedUnit>> units, int root,
                           FullyShardedDataParallelOptions options, ProcessGroup& group)
    : units_(std::move(units)),
      root_(root),
      options_(options),
      group_(group),
      called_(units_.size(), 0),
      gathered_in_forward_(units_.size(), 0),
      ready_(units_.size(), 0),
      next_to_reduce_(static_cast<int>(units_.size()) - 1) {}

void UnitSchedule::attach_hooks() {
  std::weak_ptr<UnitSchedule> weak = weak_from_this();
  for (size_t u = 0; u < units_.size(); ++u) {
    if (!units_[u]->trainable()) continue;
    for (const auto& p : units_[u]->parameters()) {
      accumulators_.push_back(base::compat::add_post_accumulate_grad_hook(p, [weak, u] {
        if (auto self = weak.lock()) self->gradient_arrived(static_cast<int>(u));
      }));
    }
  }
}

void UnitSchedule::begin_forward() {
  open_unit_ = -1;
  std::fill(gathered_in_forward_.begin(), gathered_in_forward_.end(), 0);
  if (root_ >= 0) before_unit(root_);
}

void UnitSchedule::before_unit(int unit) {
  called_[unit] = 1;
  const int last = std::min<int>(static_cast<int>(units_.size()) - 1, unit + options_.prefetch());
  if (options_.find_unused_units()) {
    // Note [Units some ranks skip]: every unit up to the prefetch horizon,
    // in unit order, whether this rank runs it or not.
    for (int next = 0; next <= last; ++next) gather_once(next);
  } else {
    for (int next = unit + 1; next <= last; ++next) units_[next]->gather_async();
  }
  gathered_in_forward_[unit] = 1;
  units_[unit]->wait_gathered();
  open_unit_ = unit;
}

void UnitSchedule::gather_once(int unit) {
  if (gathered_in_forward_[unit]) return;
  gathered_in_forward_[unit] = 1;
  units_[unit]->gather_async();
}

void UnitSchedule::after_unit(int unit, std::vector<at::Tensor>& outputs) {
  if (open_unit_ == unit) open_unit_ = -1;
  const bool hooked = std::any_of(outputs.begin(), outputs.end(),
                                  [](const at::Tensor& t) { return t.requires_grad(); });
  if (hooked) {
    watch_outputs(unit, outputs);
    // Note [Units some ranks skip]: held until reduced.
    if (options_.reshard_after_forward() && !options_.find_unused_units()) {
      units_[unit]->reshard();
    }
  } else if (!outputs.empty() || !torch::GradMode::is_enabled()) {
    units_[unit]->reshard();  // no backward will run through this unit
  }
  // Else the outputs could not be found (not a Tensor) under grad mode: the
  // unit stays gathered until its gradients have been reduced.
}

void UnitSchedule::end_forward(std::vector<at::Tensor>& outputs) {
  // A Sequential's last entry, then the root, whose backward spans the
  // whole backward: both end with the model's output.
  if (open_unit_ >= 0 && open_unit_ != root_) after_unit(open_unit_, outputs);
  if (root_ >= 0) after_unit(root_, outputs);
  open_unit_ = -1;
  if (!options_.find_unused_units()) return;
  // Note [Units some ranks skip]: the units no one gathered yet, in order.
  for (int unit = 0; unit < static_cast<int>(units_.size()); ++unit) gather_once(unit);
  const bool backward_follows = std::any_of(outputs.begin(), outputs.end(),
                                            [](const at::Tensor& t) { return t.requires_grad(); });
  if (!backward_follows) {
    for (auto& u : units_) u->reshard();
  } else if (require_sync_) {
    exchange_usage();
  }
}

void UnitSchedule::exchange_usage() {
  at::Tensor used = at::empty({static_cast<int64_t>(units_.size())}, at::kInt);
  for (size_t u = 0; u < units_.size(); ++u) used[u] = called_[u] ? 1 : 0;
  group_.all_reduce(used);
  used_by_.assign(used.data_ptr<int32_t>(), used.data_ptr<int32_t>() + used.numel());
}

bool UnitSchedule::unused_here(int unit) const {
  return options_.find_unused_units() && !used_by_.empty() && !called_[unit];
}

bool UnitSchedule::unused_everywhere(int unit) const {
  return options_.find_unused_units() && !used_by_.empty() && used_by_[unit] == 0;
}

void UnitSchedule::watch_outputs(int unit, std::vector<at::Tensor>& outputs) {
  std::weak_ptr<UnitSchedule> weak = weak_from_this();
  for (auto& output : outputs) {
    if (!output.requires_grad()) continue;
    output.register_hook([weak, unit](const at::Tensor& /*grad*/) {
      if (auto self = weak.lock()) self->before_backward(unit);
    });
  }
}

void UnitSchedule::before_backward(int unit) {
  if (!callback_queued_) {
    callback_queued_ = true;
    std::weak_ptr<UnitSchedule> weak = weak_from_this();
    base::compat::queue_backward_callback([weak] {
      if (auto self = weak.lock()) self->end_backward();
    });
  }
  units_[unit]->wait_gathered();
  units_[unit]->prepare_gradients();
  if (options_.find_unused_units()) return;  // Note [Units some ranks skip]: all gathered
  const int first = std::max(0, unit - options_.prefetch());
  for (int previous = unit - 1; previous >= first; --previous) units_[previous]->gather_async();
}

void UnitSchedule::gradient_arrived(int unit) {
  if (!units_[unit]->gradient_arrived() || !require_sync_) return;
  ready_[unit] = 1;
  launch_ready();
}

void UnitSchedule::launch_ready() {
  // A unit this rank did not run is ready from the start (its zeros), so
  // every rank launches in the same order.
  while (next_to_reduce_ >= 0 && (ready_[next_to_reduce_] || unused_here(next_to_reduce_) ||
                                  !units_[next_to_reduce_]->trainable())) {
    launch(next_to_reduce_--);
  }
}

void UnitSchedule::launch(int unit) {
  ShardedUnit& u = *units_[unit];
  if (!u.trainable() || unused_everywhere(unit)) {  // its shard's gradient stays untouched
    u.reshard();
    return;
  }
  u.reduce_async();
  u.reshard();
  // One reduction in flight once this one started: the full gradients alive
  // are the running unit's and the one being reduced (Note [The order of a
  // sharded step]).
  finish_in_flight();
  in_flight_ = unit;
}

void UnitSchedule::finish_in_flight() {
  if (in_flight_ >= 0) units_[in_flight_]->finish_reduction();
  in_flight_ = -1;
}

void UnitSchedule::end_backward() {
  callback_queued_ = false;
  if (!require_sync_) {  // no_sync(): the full gradients stay for the next backward
    for (auto& u : units_) {
      u->reshard();
      u->end_backward();
    }
    return;
  }
  while (next_to_reduce_ >= 0) launch(next_to_reduce_--);
  finish_in_flight();
  for (auto& u : units_) u->end_backward();
  std::fill(ready_.begin(), ready_.end(), 0);
  next_to_reduce_ = static_cast<int>(units_.size()) - 1;
  std::fill(called_.begin(), called_.end(), 0);
  used_by_.clear();
}

}  // namespace ddp::parallel::detail

#include "parallel/fully_sharded/unit_schedule.hpp"

#include <torch/torch.h>

#include <algorithm>

#include "comm/compat/torch_compat.hpp"

namespace ddp::parallel::detail {

UnitSchedule::UnitSchedule(std::vector<std::unique_ptr<ShardedUnit>> units, int root,
                           FullyShardedDataParallelOptions options)
    : units_(std::move(units)),
      root_(root),
      options_(options),
      ready_(units_.size(), 0),
      next_to_reduce_(static_cast<int>(units_.size()) - 1) {}

void UnitSchedule::attach_hooks() {
  std::weak_ptr<UnitSchedule> weak = weak_from_this();
  for (size_t u = 0; u < units_.size(); ++u) {
    if (!units_[u]->trainable()) continue;
    for (const auto& p : units_[u]->parameters()) {
      accumulators_.push_back(compat::add_post_accumulate_grad_hook(p, [weak, u] {
        if (auto self = weak.lock()) self->gradient_arrived(static_cast<int>(u));
      }));
    }
  }
}

void UnitSchedule::begin_forward() {
  open_unit_ = -1;
  if (root_ >= 0) before_unit(root_);
}

void UnitSchedule::before_unit(int unit) {
  units_[unit]->wait_gathered();
  const int last = std::min<int>(static_cast<int>(units_.size()) - 1, unit + options_.prefetch());
  for (int next = unit + 1; next <= last; ++next) units_[next]->gather_async();
  open_unit_ = unit;
}

void UnitSchedule::after_unit(int unit, std::vector<at::Tensor>& outputs) {
  if (open_unit_ == unit) open_unit_ = -1;
  const bool hooked = std::any_of(outputs.begin(), outputs.end(),
                                  [](const at::Tensor& t) { return t.requires_grad(); });
  if (hooked) {
    watch_outputs(unit, outputs);
    if (options_.reshard_after_forward()) units_[unit]->reshard();
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
    compat::queue_backward_callback([weak] {
      if (auto self = weak.lock()) self->end_backward();
    });
  }
  units_[unit]->wait_gathered();
  units_[unit]->prepare_gradients();
  const int first = std::max(0, unit - options_.prefetch());
  for (int previous = unit - 1; previous >= first; --previous) units_[previous]->gather_async();
}

void UnitSchedule::gradient_arrived(int unit) {
  if (!units_[unit]->gradient_arrived()) return;
  ready_[unit] = 1;
  launch_ready();
}

void UnitSchedule::launch_ready() {
  while (next_to_reduce_ >= 0 &&
         (ready_[next_to_reduce_] || !units_[next_to_reduce_]->trainable())) {
    launch(next_to_reduce_--);
  }
}

void UnitSchedule::launch(int unit) {
  ShardedUnit& u = *units_[unit];
  if (!u.trainable()) return;
  u.reduce_async();
  u.reshard();
  in_flight_.push_back(unit);
  while (in_flight_.size() > 2) {
    units_[in_flight_.front()]->finish_reduction();
    in_flight_.pop_front();
  }
}

void UnitSchedule::end_backward() {
  while (next_to_reduce_ >= 0) launch(next_to_reduce_--);
  for (int unit : in_flight_) units_[unit]->finish_reduction();
  in_flight_.clear();
  for (auto& u : units_) u->end_backward();
  std::fill(ready_.begin(), ready_.end(), 0);
  next_to_reduce_ = static_cast<int>(units_.size()) - 1;
  callback_queued_ = false;
}

}  // namespace ddp::parallel::detail

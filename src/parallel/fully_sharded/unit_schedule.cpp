#include "parallel/fully_sharded/unit_schedule.hpp"

#include <torch/csrc/autograd/graph_task.h>
#include <torch/torch.h>

#include <algorithm>
#include <functional>

#include "base/compat/torch_compat.hpp"
#include "base/str.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"

namespace ddp::parallel::detail {
namespace {

// Runs before an AccumulateGrad node adds its gradient (Note [The order of
// a sharded step]).
class BeforeAccumulate final : public torch::autograd::FunctionPreHook {
 public:
  explicit BeforeAccumulate(std::function<void()> run) : run_(std::move(run)) {}
  torch::autograd::variable_list operator()(const torch::autograd::variable_list& grads) override {
    run_();
    return grads;
  }

 private:
  std::function<void()> run_;
};

std::string quoted(const std::vector<int>& units, const std::vector<std::string>& names) {
  std::string text;
  for (int u : units) text += (text.empty() ? "'" : ", '") + names[u] + "'";
  return text;
}

}  // namespace

UnitSchedule::UnitSchedule(std::vector<std::unique_ptr<ShardedUnit>> units, int root,
                           FullyShardedDataParallelOptions options, ProcessGroup& group)
    : units_(std::move(units)),
      root_(root),
      options_(options),
      group_(group),
      order_(static_cast<int>(units_.size()), root),
      called_(units_.size(), 0),
      gathered_in_forward_(units_.size(), 0),
      cast_in_forward_(units_.size(), 0),
      reductions_(units_, order_),
      awaiting_gradients_(units_.size(), 0) {
  for (const auto& unit : units_) names_.push_back(unit->name());
  if (!options_.cache_buffers()) return;
  for (const auto& unit : units_) {
    if (!unit->trainable() || !unit->shard().device().is_cpu()) continue;
    for (const auto& p : unit->parameters()) {
      const size_t bytes = static_cast<size_t>(p.numel()) * unit->shard().element_size();
      pool_keep_bytes_ = std::max(pool_keep_bytes_, bytes);
    }
  }
}

void UnitSchedule::attach_hooks() {
  std::weak_ptr<UnitSchedule> weak = weak_from_this();
  for (size_t u = 0; u < units_.size(); ++u) {
    if (!units_[u]->trainable()) continue;
    const auto& parameters = units_[u]->parameters();
    for (size_t i = 0; i < parameters.size(); ++i) {
      accumulators_.push_back(
          base::compat::add_post_accumulate_grad_hook(parameters[i], [weak, u, i] {
            if (auto self = weak.lock()) self->gradient_arrived(static_cast<int>(u), i);
          }));
      // The unit keeps its parameters' AccumulateGrad nodes alive.
      torch::autograd::impl::try_get_grad_accumulator(parameters[i])
          ->add_pre_hook(std::make_unique<BeforeAccumulate>([weak, u] {
            if (auto self = weak.lock()) self->before_accumulate(static_cast<int>(u));
          }));
    }
  }
}

void UnitSchedule::begin_forward(bool training) {
  // Note [One state per step]: what a forward or backward that threw left.
  if (phase_ == Phase::kBackward) abandon_backward();
  if (phase_ == Phase::kForward) {
    for (auto& u : units_) {
      u->restore_buffers();
      u->reshard();
    }
    std::fill(called_.begin(), called_.end(), 0);
  }
  callback_queued_ = false;  // a backward that threw never ran its callback
  phase_ = Phase::kForward;
  training_ = training && torch::GradMode::is_enabled();
  open_unit_ = -1;
  order_.begin();
  std::fill(gathered_in_forward_.begin(), gathered_in_forward_.end(), 0);
  std::fill(cast_in_forward_.begin(), cast_in_forward_.end(), 0);
  if (options_.find_unused_units()) {
    // Note [Units some ranks skip]: every unit, in unit order, before the
    // model's code runs.
    for (int unit = 0; unit < static_cast<int>(units_.size()); ++unit) gather_once(unit);
  }
  if (root_ >= 0) before_unit(root_);
}

void UnitSchedule::before_unit(int unit) {
  if (training_) called_[unit] = 1;
  if (order_.enter(unit) && training_ && !options_.find_unused_units()) check_runs(unit);
  if (!options_.find_unused_units()) prefetch_after(unit);
  gathered_in_forward_[unit] = 1;
  units_[unit]->wait_gathered();
  if (!units_[unit]->buffers_cast()) {
    units_[unit]->cast_buffers();
    cast_in_forward_[unit] = 1;
  }
  open_unit_ = unit;
}

void UnitSchedule::check_runs(int unit) {
  // Note [The order the units run in]
  if (!order_.recorded()) {
    check_same_unit(group_, unit, order_.entered_count() - 1, names_);
    return;
  }
  const std::vector<int> skipped = order_.skipped_before(unit);
  if (skipped.empty()) return;
  throw ConfigError(base::detail::str(
      "FullyShardedDataParallel: rank ", group_.rank(), " runs unit '", names_[unit],
      "' without running ", quoted(skipped, names_),
      ", which came before it in the first training forward; without find_unused_units every "
      "rank gathers and reduces every unit in every step, so a unit some ranks skip would pair "
      "different collectives: set find_unused_units(true) in FullyShardedDataParallelOptions."));
}

void UnitSchedule::prefetch_after(int unit) {
  if (!order_.recorded()) return;  // the first forward records the order
  const int from = order_.position_of(unit);
  const int last = std::min(order_.size() - 1, from + options_.prefetch());
  for (int p = from + 1; p <= last; ++p) units_[order_.at(p)]->gather_async();
}

void UnitSchedule::gather_once(int unit) {
  if (gathered_in_forward_[unit]) return;
  gathered_in_forward_[unit] = 1;
  units_[unit]->gather_async();
}

void UnitSchedule::after_unit(int unit, std::vector<at::Tensor>& outputs, bool checkpointed) {
  if (open_unit_ == unit) open_unit_ = -1;
  units_[unit]->sync_buffers();
  const bool hooked = std::any_of(outputs.begin(), outputs.end(),
                                  [](const at::Tensor& t) { return t.requires_grad(); });
  if (hooked) {
    watch_outputs(unit, outputs);
    // Note [Units some ranks skip]: held until reduced. The unit a training
    // forward runs last is the one its backward starts with: kept (Note
    // [The order of a sharded step]).
    const bool backward_starts_here = training_ && order_.recorded() && unit != root_ &&
                                      order_.position_of(unit) == order_.size() - 1;
    if (options_.reshard_after_forward() && !options_.find_unused_units() &&
        !backward_starts_here) {
      units_[unit]->reshard(/*after_forward=*/training_);
    }
  } else if (!outputs.empty() || !torch::GradMode::is_enabled()) {
    // No backward runs through this unit, unless a checkpoint recomputes
    // it, which gathers it again (Note [Checkpointed units]), from the
    // node's slice kept for it under hpZ (Note [Resharding to the node]);
    // with find_unused_units a training forward holds it until its
    // reduction.
    if (!(training_ && options_.find_unused_units())) {
      units_[unit]->reshard(/*after_forward=*/training_ && checkpointed);
    }
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
  const bool backward_follows = std::any_of(outputs.begin(), outputs.end(),
                                            [](const at::Tensor& t) { return t.requires_grad(); });
  if (training_ && backward_follows && !options_.find_unused_units()) {
    std::vector<int> missing;
    for (int u : order_.not_entered()) {
      if (units_[u]->trainable()) missing.push_back(u);
    }
    if (!missing.empty()) {
      throw ConfigError(base::detail::str(
          "FullyShardedDataParallel: unit(s) ", quoted(missing, names_),
          " did not run in this training forward on rank ", group_.rank(),
          "; without find_unused_units every unit is reduced in every backward, and a unit "
          "that did not run would get a gradient of zeros that momentum and weight decay act "
          "on: set find_unused_units(true) in FullyShardedDataParallelOptions."));
    }
    if (!order_.recorded()) order_.record();
  }
  phase_ = backward_follows ? Phase::kAwaitingBackward : Phase::kIdle;
  if (!backward_follows) {  // what this forward cast (an earlier one's may wait for a backward)
    for (size_t u = 0; u < units_.size(); ++u) {
      if (cast_in_forward_[u]) units_[u]->restore_buffers();
    }
  }
  if (!options_.find_unused_units()) return;
  if (!backward_follows) {
    for (auto& u : units_) u->reshard();
  } else if (require_sync_) {
    exchange_usage();
  }
}

std::vector<int> UnitSchedule::unentered_units() const {
  std::vector<int> units;
  for (int u : order_.not_entered()) {
    if (!units_[u]->holds_data()) units.push_back(u);
  }
  return units;
}

void UnitSchedule::exchange_usage() {
  at::Tensor used = at::empty({static_cast<int64_t>(units_.size())}, at::kInt);
  for (size_t u = 0; u < units_.size(); ++u) used[u] = called_[u] ? 1 : 0;
  group_.all_reduce(used);
  used_by_.assign(used.data_ptr<int32_t>(), used.data_ptr<int32_t>() + used.numel());
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

bool UnitSchedule::backward_accumulates() const {
  // autograd::grad (and backward(inputs)) name what they compute; a
  // parameter's AccumulateGrad then runs only if one of those is it.
  const auto* exec_info = torch::autograd::get_current_graph_task_exec_info();
  if (exec_info == nullptr || exec_info->empty()) return true;
  for (const auto& unit : units_) {
    if (!unit->trainable()) continue;
    for (const auto& p : unit->parameters()) {
      const auto accumulator = torch::autograd::impl::try_get_grad_accumulator(p);
      if (!accumulator) continue;
      const auto found = exec_info->find(accumulator.get());
      if (found != exec_info->end() && found->second.needed_) return true;
    }
  }
  return false;
}

void UnitSchedule::enter_backward(int unit, bool prepare_gradients) {
  if (!callback_queued_) {
    callback_queued_ = true;
    accumulates_ = backward_accumulates();
    if (accumulates_) phase_ = Phase::kBackward;
    // Note [The backward's large blocks from a pool]: LibTorch's gradients.
    if (accumulates_ && pool_keep_bytes_ > 0) backward_pool_.emplace(pool_keep_bytes_);
    std::weak_ptr<UnitSchedule> weak = weak_from_this();
    base::compat::queue_backward_callback([weak] {
      if (auto self = weak.lock()) self->end_backward();
    });
  }
  units_[unit]->wait_gathered(/*in_backward=*/true);
  if (!options_.find_unused_units() && order_.recorded()) {  // else all are gathered
    const int at = order_.position_of(unit);
    for (int p = at - 1; p >= std::max(0, at - options_.prefetch()); --p) {
      units_[order_.at(p)]->gather_async(/*in_backward=*/true);
    }
  }
  // The reduction in flight and the gradient buffer wait for the unit's
  // first gradient (Note [The order of a sharded step]).
  if (accumulates_) awaiting_gradients_[unit] = prepare_gradients ? 2 : 1;
}

void UnitSchedule::before_accumulate(int unit) {
  const char awaiting = awaiting_gradients_[unit];
  if (awaiting == 0) return;
  awaiting_gradients_[unit] = 0;
  // The reduction the unit after this one started, which ran beside this
  // unit's backward, finishes (its full gradient freed) before this unit's
  // gradient arrives: one full gradient alive at a time.
  if (!options_.overlap_reduction()) reductions_.finish_in_flight();
  if (awaiting == 2) units_[unit]->prepare_gradients();
}

void UnitSchedule::gradient_arrived(int unit, size_t parameter) {
  // Note [Units some ranks skip]: with find_unused_units, at the end.
  if (!units_[unit]->gradient_arrived(parameter) || !require_sync_ ||
      options_.find_unused_units()) {
    return;
  }
  reductions_.ready(unit);
}

void UnitSchedule::end_backward() {
  callback_queued_ = false;
  // Note [One state per step]: a backward that accumulated into no unit
  // leaves them gathered for the backward through the graph it created.
  if (!accumulates_) return;
  if (require_sync_) {
    reductions_.finish([this](int unit) { return unused_everywhere(unit); });
    if (options_.find_unused_units()) drop_unreceived_gradients();
  }
  for (auto& u : units_) {
    if (!require_sync_) u->accumulate_unsynced();
    u->reshard();
    u->end_backward();
    u->restore_buffers();
  }
  if (require_sync_) {
    reset_backward();
  } else {  // no_sync(): the full gradients, and which units ran, stay for the next backward
    phase_ = Phase::kIdle;
    accumulates_ = false;
    backward_pool_.reset();
    std::fill(awaiting_gradients_.begin(), awaiting_gradients_.end(), 0);
  }
}

void UnitSchedule::drop_unreceived_gradients() {
  // Note [A unit's pieces]: one all-reduce of which parameters received a
  // gradient on each rank, since the last synchronized backward.
  std::vector<int32_t> flags;
  for (const auto& u : units_) {
    if (u->trainable()) flags.insert(flags.end(), u->received().begin(), u->received().end());
  }
  at::Tensor anywhere = at::tensor(flags, at::kInt);
  group_.all_reduce(anywhere);
  const int32_t* next = anywhere.data_ptr<int32_t>();
  for (auto& u : units_) {
    if (!u->trainable()) continue;
    u->drop_unreceived_gradients(next);
    next += u->received().size();
  }
}

void UnitSchedule::reset_backward() {
  phase_ = Phase::kIdle;
  accumulates_ = false;
  backward_pool_.reset();
  reductions_.reset();
  std::fill(awaiting_gradients_.begin(), awaiting_gradients_.end(), 0);
  std::fill(called_.begin(), called_.end(), 0);
  used_by_.clear();
}

void UnitSchedule::abandon_backward() {
  callback_queued_ = false;
  // The reduction in flight ends (every rank that threw at the same point
  // issued it) and its result is dropped: the shards' gradients may have
  // been zeroed since, for the step that follows.
  for (auto& u : units_) {
    u->abandon_gradients();
    u->reshard();
    u->restore_buffers();
  }
  reset_backward();
}

}  // namespace ddp::parallel::detail

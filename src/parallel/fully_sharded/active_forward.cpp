// The sharded forward a thread runs: what sharded_call() finds (Note
// [Where the units come from]), and how a checkpointed function's
// recompute finds it again in backward (Note [Checkpointed units]).

#include <torch/torch.h>

#include <memory>
#include <utility>
#include <vector>

#include "base/str.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/parallel/fully_sharded_data_parallel.hpp"
#include "parallel/fully_sharded/unit_schedule.hpp"

namespace ddp::parallel {
namespace {

// The wrapper whose forward runs on this thread (sharded_call finds it),
// and whether it is a checkpointed function's recompute in backward.
thread_local FullyShardedDataParallelImpl* active_forward = nullptr;
thread_local bool recomputing = false;
// Checkpointed functions running on this thread, nested.
thread_local int checkpointed_runs = 0;

}  // namespace

namespace detail {

struct ShardedForwardRef {
  FullyShardedDataParallelImpl* owner;
  std::weak_ptr<UnitSchedule> alive;  // expires with the wrapper
};

CheckpointedRun::CheckpointedRun(std::shared_ptr<const ShardedForwardRef> recompute_of)
    : previous_active_(active_forward), previous_recomputing_(recomputing) {
  if (recompute_of && recompute_of->alive.expired()) {
    throw ConfigError(
        "ddp::nn::checkpoint: the FullyShardedDataParallel whose units this checkpointed "
        "function ran was destroyed before the backward that recomputes it; keep the wrapper "
        "alive until the backward through its forward has run.");
  }
  if (recompute_of) {
    active_forward = recompute_of->owner;
    recomputing = true;
  } else if (active_forward) {  // in a recompute too: a checkpoint nested in one
    forward_ = std::make_shared<ShardedForwardRef>(
        ShardedForwardRef{active_forward, active_forward->schedule_});
  }
  ++checkpointed_runs;
}

CheckpointedRun::~CheckpointedRun() {
  --checkpointed_runs;
  active_forward = previous_active_;
  recomputing = previous_recomputing_;
}

int enter_unit(const torch::nn::Module* module) {
  if (!active_forward) return -1;
  const int unit = active_forward->unit_of(module);
  if (unit < 0) return unit;
  if (recomputing) {
    active_forward->schedule_->before_recompute(unit);
  } else {
    active_forward->schedule_->before_unit(unit);
  }
  return unit;
}

void leave_unit(int unit, std::vector<at::Tensor>& outputs) {
  // A recompute's unit stays gathered until its reduction.
  if (active_forward && !recomputing) {
    active_forward->schedule_->after_unit(unit, outputs, /*checkpointed=*/checkpointed_runs > 0);
  }
}

at::Tensor unit_input(int unit, const at::Tensor& tensor) {
  return unit >= 0 && active_forward ? active_forward->cast_tensor(tensor) : tensor;
}

}  // namespace detail

FullyShardedDataParallelImpl::ActiveForward::ActiveForward(FullyShardedDataParallelImpl& owner)
    : previous_(active_forward) {
  if (checkpointed_runs > 0) {
    throw ConfigError(
        "FullyShardedDataParallel: its forward runs inside ddp::nn::checkpoint, whose first run "
        "is under no grad, so its units would prepare for no backward; checkpoint its units "
        "instead, as ddp::nn::checkpoint(block, x) in place of ddp::sharded_call(block, x) in "
        "the module's forward (Note [Checkpointed units] in "
        "ddp/parallel/fully_sharded_units.hpp).");
  }
  active_forward = &owner;
  try {
    owner.begin_forward();
  } catch (...) {
    active_forward = previous_;  // the destructor will not run
    throw;
  }
}

FullyShardedDataParallelImpl::ActiveForward::~ActiveForward() { active_forward = previous_; }

}  // namespace ddp::parallel

#include "ddp/hvd/learning_rate.hpp"

#include <algorithm>
#include <string>

#include "base/str.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/hvd/runtime.hpp"

namespace ddp::hvd {

double scaled_learning_rate(double base_lr, int size, int64_t step, int64_t warmup_steps) {
  if (size < 1 || step < 0 || warmup_steps < 0) {
    throw ConfigError(base::detail::str(
        "hvd::scaled_learning_rate: size ", size, ", step ", step, ", warmup_steps ", warmup_steps,
        "; size must be at least 1, step and warmup_steps non-negative."));
  }
  if (warmup_steps == 0) return base_lr * size;
  const double progress =
      static_cast<double>(std::min(step, warmup_steps)) / static_cast<double>(warmup_steps);
  return base_lr * (1.0 + (size - 1) * progress);
}

LearningRateWarmupOptions::LearningRateWarmupOptions(int64_t warmup_steps)
    : warmup_steps_(warmup_steps) {}

LearningRateWarmup::LearningRateWarmup(torch::optim::Optimizer& optimizer,
                                       LearningRateWarmupOptions options)
    : LRScheduler(optimizer), options_(std::move(options)) {
  step_count_ = 0;  // LibTorch 1.13's LRScheduler leaves it uninitialized.
  if (options_.warmup_steps() < 0 || options_.size() < 0) {
    throw ConfigError(base::detail::str("hvd::LearningRateWarmup: warmup_steps is ",
                                        options_.warmup_steps(), " and size ", options_.size(),
                                        "; both must be non-negative (size 0 means hvd::size())."));
  }
  if (options_.size() == 0) options_.size(hvd::size());
  for (const auto& group : optimizer.param_groups()) base_lrs_.push_back(group.options().get_lr());
}

std::vector<double> LearningRateWarmup::get_lrs() {
  // step_count_ counts the step() calls before this one.
  const int64_t steps = static_cast<int64_t>(step_count_) + 1;
  std::vector<double> rates;
  for (double base : base_lrs_) {
    rates.push_back(scaled_learning_rate(base, options_.size(), steps, options_.warmup_steps()));
  }
  return rates;
}

}  // namespace ddp::hvd

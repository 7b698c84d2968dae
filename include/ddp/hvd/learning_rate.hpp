#pragma once

/// \file learning_rate.hpp
/// Scaling the learning rate with the number of ranks, with a linear
/// warm-up (Goyal et al., "Accurate, Large Minibatch SGD"; Horovod's
/// LearningRateWarmupCallback): with N ranks the global batch is N times
/// larger, so the learning rate grows from its single-process value to N
/// times that value over the first warm-up steps.
///
/// \code
///   ddp::hvd::DistributedOptimizer optimizer(
///       torch::optim::SGD(model->parameters(), 0.01));  // the 1-process lr
///   ddp::hvd::LearningRateWarmup warmup(
///       optimizer.optimizer(), ddp::hvd::LearningRateWarmupOptions(/*warmup_steps=*/500));
///   for (auto& [x, y] : batches) {
///     optimizer.zero_grad();
///     torch::nll_loss(model->forward(x), y).backward();
///     optimizer.step();
///     warmup.step();  // 0.01 -> 0.01 * size over the 500 steps
///   }
/// \endcode

#include <torch/arg.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/schedulers/lr_scheduler.h>

#include <cstdint>
#include <vector>

namespace ddp::hvd {

/// The learning rate after `step` steps: `base_lr * (1 + (size - 1) *
/// min(step, warmup_steps) / warmup_steps)`, i.e. base_lr at step 0 and
/// base_lr * size from step warmup_steps on (at once when warmup_steps is 0).
/// \throws ConfigError for size < 1, step < 0 or warmup_steps < 0.
double scaled_learning_rate(double base_lr, int size, int64_t step, int64_t warmup_steps);

/// Options of LearningRateWarmup.
struct LearningRateWarmupOptions {
  /// Warms up over `warmup_steps` calls of step().
  /* implicit */ LearningRateWarmupOptions(int64_t warmup_steps);
  /// Steps over which the rate grows linearly (0: scaled at the first step).
  TORCH_ARG(int64_t, warmup_steps);
  /// The factor reached (the number of ranks); 0: hvd::size().
  TORCH_ARG(int, size) = 0;
};

/// A learning-rate scheduler: each step() sets every param group's rate to
/// scaled_learning_rate(its rate at construction, size, steps so far,
/// warmup_steps). Call it once per optimizer step, after the step.
class LearningRateWarmup : public torch::optim::LRScheduler {
 public:
  /// Takes each param group's current rate as its single-process rate.
  /// \throws ConfigError for invalid options, or size 0 without hvd::init().
  LearningRateWarmup(torch::optim::Optimizer& optimizer, LearningRateWarmupOptions options);

  /// The single-process rate of each param group.
  const std::vector<double>& base_lrs() const { return base_lrs_; }
  /// The options in force (size resolved).
  const LearningRateWarmupOptions& options() const { return options_; }

 protected:
  /// The rates for the step() being taken (LRScheduler's hook).
  std::vector<double> get_lrs() override;

 private:
  LearningRateWarmupOptions options_;
  std::vector<double> base_lrs_;
};

}  // namespace ddp::hvd

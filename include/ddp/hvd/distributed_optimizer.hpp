#pragma once

/// \file distributed_optimizer.hpp
/// Horovod's DistributedOptimizer: wraps any torch::optim::Optimizer and
/// averages the gradients across ranks before each step, fused into few
/// large all-reduces.
///
/// \code
///   ddp::hvd::init();
///   ddp::hvd::DistributedOptimizer optimizer(
///       torch::optim::SGD(model->parameters(), 0.01 * ddp::hvd::size()));
///   ddp::hvd::broadcast_parameters(*model, 0);
///   ddp::hvd::broadcast_optimizer_state(optimizer.optimizer(), 0);
///   for (auto& [x, y] : batches) {
///     optimizer.zero_grad();
///     torch::nll_loss(model->forward(x), y).backward();  // reductions start here
///     optimizer.step();                                  // waits, then updates
///   }
/// \endcode
///
/// Note [When gradients travel]
/// Each parameter's gradient accumulator gets a hook. After the
/// parameter's backward_passes_per_step-th accumulation its gradient is
/// ready; when every gradient of a fusion buffer is ready the buffer is
/// packed and its all-reduce starts asynchronously, while backward goes on.
/// Buffers start in one fixed order on every rank (a buffer waits for the
/// ones before it). step() (or synchronize()) starts the buffers that are
/// not started yet, with a zero gradient for a parameter that got none
/// (another rank may have one, as Horovod does), waits for all of them,
/// writes the results into .grad and only then runs the wrapped optimizer.

#include <torch/arg.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <memory>
#include <type_traits>
#include <vector>

#include "ddp/comm/process_group_fwd.hpp"
#include "ddp/comm/reduce_op.hpp"
#include "ddp/parallel/join.hpp"

namespace ddp::hvd {

namespace detail {
class GradientFusion;
}  // namespace detail

/// How gradients travel (Horovod's hvd.Compression).
enum class Compression {
  kNone,  ///< In their own dtype (hvd.Compression.none).
  /// float32 and float64 gradients travel as float16 and come back in
  /// their own dtype (hvd.Compression.fp16): half the bytes, about three
  /// significant digits. With kAverage they are divided by the world size
  /// before the cast, so that the sum stays in float16's range.
  kFp16,
};

/// Options of DistributedOptimizer, as Horovod's keyword arguments.
struct DistributedOptimizerOptions {
  /// The group gradients are reduced over; null: the group of hvd::init().
  TORCH_ARG(std::shared_ptr<ProcessGroup>, process_group) = nullptr;
  /// kAverage (hvd.Average, the default) or kSum (hvd.Sum).
  TORCH_ARG(ReduceOp, op) = ReduceOp::kAverage;
  /// Largest fusion buffer in bytes (HOROVOD_FUSION_THRESHOLD, 64 MiB by
  /// default), counted in the dtype that travels; a larger gradient gets a
  /// buffer of its own. 0 disables fusion: one all-reduce per gradient.
  TORCH_ARG(int64_t, fusion_threshold_bytes) = 64 * 1024 * 1024;
  /// Backward passes whose gradients accumulate locally before they are
  /// reduced; call step() once after that many backward passes.
  TORCH_ARG(int64_t, backward_passes_per_step) = 1;
  /// Divide the accumulated gradients by backward_passes_per_step (their
  /// mean instead of their sum), as Horovod's option of the same name.
  TORCH_ARG(bool, average_aggregated_gradients) = false;
  /// See Compression.
  TORCH_ARG(Compression, compression) = Compression::kNone;
};

/// What the fusion did, for tests and tuning.
struct DistributedOptimizerStats {
  /// Size in bytes (as they travel) of each fusion buffer, in launch order.
  std::vector<int64_t> buffer_bytes;
  /// Buffers whose all-reduce started during the last backward pass,
  /// rather than in step().
  int64_t launched_during_backward = 0;
  /// Times the gradients have been reduced.
  int64_t synchronizations = 0;
};

/// Averages (or sums) gradients across the ranks of a group, then steps the
/// wrapped optimizer. Pass `optimizer()` to learning-rate schedulers and
/// snapshots. Parameters that do not require a gradient are left alone.
class DistributedOptimizer : public Joinable {
 public:
  /// Wraps `optimizer`; its parameters must be the same (shapes, dtypes,
  /// order) on every rank.
  /// \throws ConfigError for invalid options, a null optimizer, or no group.
  explicit DistributedOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer,
                                DistributedOptimizerOptions options = {});

  /// Wraps an optimizer given by value, e.g.
  /// `DistributedOptimizer(torch::optim::Adam(model->parameters()))`.
  template <typename OptimizerType, typename = std::enable_if_t<std::is_base_of_v<
                                        torch::optim::Optimizer, std::decay_t<OptimizerType>>>>
  explicit DistributedOptimizer(OptimizerType&& optimizer, DistributedOptimizerOptions options = {})
      : DistributedOptimizer(
            std::make_shared<std::decay_t<OptimizerType>>(std::forward<OptimizerType>(optimizer)),
            std::move(options)) {}

  ~DistributedOptimizer();
  DistributedOptimizer(const DistributedOptimizer&) = delete;
  DistributedOptimizer& operator=(const DistributedOptimizer&) = delete;

  /// Reduces the gradients (unless synchronize() already did since the
  /// last step) and steps the wrapped optimizer.
  void step();

  /// Reduces the gradients now, e.g. to clip them before step(); the next
  /// step() then does not reduce again.
  void synchronize();

  /// Zeroes the gradients (the wrapped optimizer's zero_grad()).
  void zero_grad();

  /// The wrapped optimizer.
  torch::optim::Optimizer& optimizer() { return *optimizer_; }
  /// The wrapped optimizer's param groups.
  std::vector<torch::optim::OptimizerParamGroup>& param_groups() {
    return optimizer_->param_groups();
  }
  /// The options in force.
  const DistributedOptimizerOptions& options() const { return options_; }
  /// What the fusion did.
  DistributedOptimizerStats stats() const;

  /// Joinable (ddp/parallel/join.hpp): each step starts a round at its first
  /// gradient; a joined rank issues the step's all-reduces with zeros.
  ProcessGroup& join_process_group() override { return *options_.process_group(); }
  /// Joinable: one step's all-reduces with zeros, when the others sync.
  void join_shadow(const JoinRound& round) override;
  /// Joinable: copies the wrapped optimizer's parameters from `source`
  /// (buffers, which the optimizer does not hold, stay as they are).
  void join_finish(int source) override;

 private:
  std::shared_ptr<torch::optim::Optimizer> optimizer_;
  DistributedOptimizerOptions options_;
  std::shared_ptr<detail::GradientFusion> fusion_;
  bool synchronized_ = false;
};

}  // namespace ddp::hvd

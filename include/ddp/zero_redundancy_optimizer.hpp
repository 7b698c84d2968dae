#pragma once

/// \file zero_redundancy_optimizer.hpp
/// ZeroRedundancyOptimizer: the optimizer state sharded across the ranks
/// (ZeRO stage 1), and optionally the averaged gradients too (stage 2), as
/// PyTorch's torch.distributed.optim.ZeroRedundancyOptimizer and ZeRO
/// (Rajbhandari et al., SC 2020).
///
/// \code
///   // Stage 1, beside DistributedDataParallel (which averages gradients):
///   ddp::DistributedDataParallel model(Net(), group);
///   ddp::ZeroRedundancyOptimizer optimizer(
///       model->parameters(),
///       ddp::zero_optimizer<torch::optim::Adam>(torch::optim::AdamOptions(1e-3)), group);
///   ...  loss.backward(); optimizer.step();
///
///   // Stage 2, on the bare model: step() reduce-scatters the gradients.
///   ddp::ZeroRedundancyOptimizer optimizer(
///       net->parameters(), ddp::zero_optimizer<torch::optim::AdamW>(...),
///       ddp::ZeroRedundancyOptimizerOptions().stage(2), group);
/// \endcode

#include <torch/arg.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ddp/process_group.hpp"

namespace ddp {

/// Makes the wrapped optimizer over a rank's shard (the parameter pieces it
/// owns); see zero_optimizer().
using ZeroOptimizerFactory =
    std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<at::Tensor> shard)>;

/// A factory for OptimizerType with `options`, e.g.
/// `zero_optimizer<torch::optim::Adam>(torch::optim::AdamOptions(1e-3))`.
template <typename OptimizerType, typename OptionsType>
ZeroOptimizerFactory zero_optimizer(OptionsType options) {
  return [options](std::vector<at::Tensor> shard) -> std::unique_ptr<torch::optim::Optimizer> {
    return std::make_unique<OptimizerType>(std::move(shard), options);
  };
}

/// Options of ZeroRedundancyOptimizer.
struct ZeroRedundancyOptimizerOptions {
  /// 1: each rank keeps the optimizer state of its shard only; gradients
  /// come averaged (from DistributedDataParallel). 2: step() also averages
  /// the gradients, by a reduce-scatter into each rank's shard, and releases
  /// every full gradient (the model must not be wrapped in DDP).
  TORCH_ARG(int, stage) = 1;
};

/// Shards the optimizer state: the parameters (of each dtype and device)
/// are laid out back to back in one flat buffer, cut into equal shards, one
/// per rank; the wrapped optimizer sees only this rank's shard, as one piece
/// per parameter it overlaps. step() runs it on the shard and all-gathers
/// the updated shards into every rank's parameters.
///
/// Note [Sharding by element]
/// Shards are cut at element boundaries, not at parameter boundaries, so
/// every rank owns the same number of elements (to the padding of fewer
/// than world-size elements) whatever the parameter sizes. This is exact for
/// element-wise optimizers (SGD, Adam, AdamW, RMSprop, Adagrad): a parameter
/// split over two ranks is updated piece by piece just as it would be whole.
/// A parameter without a gradient gives its pieces none, so the optimizer
/// skips it as it would. The parameters become views into the flat buffer:
/// construct after moving the model to its device and dtype.
class ZeroRedundancyOptimizer {
 public:
  /// \throws ConfigError for a null group, an unknown stage, no parameters,
  ///   or a parameter that does not require grad.
  ZeroRedundancyOptimizer(std::vector<at::Tensor> parameters, ZeroOptimizerFactory make_optimizer,
                          ZeroRedundancyOptimizerOptions options,
                          std::shared_ptr<ProcessGroup> group);
  /// Stage 1.
  ZeroRedundancyOptimizer(std::vector<at::Tensor> parameters, ZeroOptimizerFactory make_optimizer,
                          std::shared_ptr<ProcessGroup> group)
      : ZeroRedundancyOptimizer(std::move(parameters), std::move(make_optimizer), {},
                                std::move(group)) {}
  ~ZeroRedundancyOptimizer();

  /// Updates every parameter on every rank: (stage 2: averages the
  /// gradients into the shards,) steps the wrapped optimizer on this rank's
  /// shard, and all-gathers the shards.
  void step();
  /// Clears every parameter's gradient (sets it undefined).
  void zero_grad();

  /// The optimizer over this rank's shard (its param_groups hold the pieces).
  torch::optim::Optimizer& local_optimizer() { return *optimizer_; }
  /// Elements of the parameters this rank owns (the shard, without padding).
  int64_t shard_elements() const;
  /// Bytes of optimizer state this rank holds (momentum, Adam's moments, ...)
  /// for SGD, Adam, AdamW, RMSprop and Adagrad.
  int64_t state_bytes() const;
  /// The options in force.
  const ZeroRedundancyOptimizerOptions& options() const { return options_; }

 private:
  struct FlatGroup;
  void reduce_scatter_gradients(FlatGroup& flat);

  std::vector<at::Tensor> parameters_;
  ZeroRedundancyOptimizerOptions options_;
  std::shared_ptr<ProcessGroup> group_;
  std::vector<std::unique_ptr<FlatGroup>> flats_;
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

}  // namespace ddp

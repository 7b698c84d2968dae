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
///   optimizer.zero_grad();
///   torch::nll_loss(model->forward(x), y).backward();
///   optimizer.step();
/// \endcode
///
/// \code
///   // Stage 2, on the bare model: backward reduce-scatters the gradients.
///   ddp::ZeroRedundancyOptimizer optimizer(
///       net->parameters(),
///       ddp::zero_optimizer<torch::optim::AdamW>(torch::optim::AdamWOptions(1e-3)),
///       ddp::ZeroRedundancyOptimizerOptions().stage(2), group);
/// \endcode

#include <torch/arg.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ddp/comm/process_group_fwd.hpp"
#include "ddp/parallel/join.hpp"
#include "ddp/parallel/sharded_state.hpp"

namespace ddp::parallel {
namespace detail {
class GradientShards;
}  // namespace detail

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
  /// come averaged (from DistributedDataParallel). 2: the gradients are
  /// averaged too, each bucket reduce-scattered into its owners' chunks
  /// while backward still runs, and every full gradient is released (the
  /// model must not be wrapped in DDP).
  TORCH_ARG(int, stage) = 1;
  /// Parameters are grouped, from the last registered to the first (the
  /// order backward produces their gradients in), into buckets of about
  /// this many MiB; a bucket closes once it reaches the cap, as DDP's do.
  /// Each bucket is sharded on its own and, at stage 2, reduce-scattered as
  /// soon as its last gradient is ready.
  TORCH_ARG(double, bucket_cap_mb) = 25;
  /// Stage 2: backward passes whose gradients accumulate (summed, in .grad)
  /// before a step; the last one launches the reduce-scatters. Stage 1
  /// takes 1 (accumulate with DDP's no_sync()).
  TORCH_ARG(int64_t, backward_passes_per_step) = 1;
};

/// Shards the optimizer state: the parameters (of each dtype and device)
/// are grouped into buckets, each laid out back to back in one flat buffer
/// and cut into world-size equal chunks; rank r owns chunk r of every
/// bucket. The wrapped optimizer sees only this rank's chunks, as one piece
/// per parameter it overlaps. step() runs it on them and all-gathers each
/// bucket's updated chunks into every rank's parameters.
///
/// Note [Sharding by element]
/// Chunks are cut at element boundaries, not at parameter boundaries, so
/// every rank owns the same number of elements of each bucket (to the
/// padding of fewer than world-size elements) whatever the parameter sizes.
/// This is exact for element-wise optimizers (SGD, Adam, AdamW, RMSprop,
/// Adagrad): a parameter split over two ranks is updated piece by piece
/// just as it would be whole. A parameter without a gradient gives its
/// pieces none, so the optimizer skips it as it would. The parameters
/// become views into the buckets' buffers: construct after moving the model
/// to its device and dtype.
///
/// Stage 2 reduce-scatters each bucket as soon as backward has produced
/// its gradients, releasing them, so no full gradient is kept after
/// backward (Note [Stage 2 overlaps backward], in
/// src/parallel/zero_redundancy_optimizer/gradient_shards.hpp).
///
/// Under a ddp::Join (uneven inputs) it is a Joinable: a rank that has
/// joined keeps its role as the owner of its shard, stepping it in every
/// round that synchronizes, so that the all-gather still has every shard.
/// Stage 1: list it after the DistributedDataParallel it serves,
/// `Join({model.get(), &optimizer})`, whose shadow leaves the averaged
/// gradients of the ranks still training in the joined rank's .grad.
/// Stage 2: a step's round starts before its first reduce-scatter; a joined
/// rank contributes zeros, and the average is over the world or the
/// contributing ranks as the Join's divide_by_initial_world_size says.
/// Call step() only in iterations that synchronize (stage 1: not after a
/// no_sync() micro-batch).
class ZeroRedundancyOptimizer : public Joinable, public ShardedState {
 public:
  /// \throws ConfigError for a null group, an unknown stage, a cap that is
  ///   not positive, backward_passes_per_step below 1 (or above 1 at stage
  ///   1), no parameters, or a parameter that does not require grad.
  /// \throws InvalidArgumentError on every rank when the ranks differ in
  ///   their parameters (number, dtypes, shapes, in order), stage,
  ///   bucket_cap_mb, backward_passes_per_step or buckets, naming the first
  ///   difference and the ranks; checked with two all-gathers.
  ZeroRedundancyOptimizer(std::vector<at::Tensor> parameters, ZeroOptimizerFactory make_optimizer,
                          ZeroRedundancyOptimizerOptions options,
                          std::shared_ptr<ProcessGroup> group);
  /// Stage 1.
  ZeroRedundancyOptimizer(std::vector<at::Tensor> parameters, ZeroOptimizerFactory make_optimizer,
                          std::shared_ptr<ProcessGroup> group)
      : ZeroRedundancyOptimizer(std::move(parameters), std::move(make_optimizer), {},
                                std::move(group)) {}
  ~ZeroRedundancyOptimizer() override;

  /// Updates every parameter on every rank: (stage 2: finishes averaging
  /// the gradients into the shards,) steps the wrapped optimizer on this
  /// rank's shard, and all-gathers the shards.
  void step();
  /// Clears every parameter's gradient (sets it undefined).
  /// \throws InvalidArgumentError at stage 2 between a backward pass that
  ///   launched reduce-scatters and step().
  void zero_grad();

  /// The optimizer over this rank's shard (its param_groups hold the pieces).
  torch::optim::Optimizer& local_optimizer() override { return *optimizer_; }
  /// The optimizer over this rank's shard.
  const torch::optim::Optimizer& local_optimizer() const override { return *optimizer_; }
  /// Elements of the parameters this rank owns (the shard, without padding).
  int64_t shard_elements() const;
  /// Elements of each bucket (without padding), in bucket order.
  std::vector<int64_t> bucket_elements() const;
  /// Bytes of optimizer state this rank holds (momentum, Adam's moments, ...)
  /// for SGD, Adam, AdamW, RMSprop and Adagrad.
  int64_t state_bytes() const;
  /// The options in force.
  const ZeroRedundancyOptimizerOptions& options() const { return options_; }

  /// This rank's pieces of parameters(), in the order of
  /// local_optimizer()'s parameters (what snapshots save and re-shard;
  /// ddp/snapshot/snapshot_manager.hpp).
  std::vector<Piece> pieces() const override;
  /// Each parameter's elements.
  std::vector<int64_t> numels() const override;
  /// The parameters, in the order given (views into the flat buffers).
  const std::vector<at::Tensor>& parameters() const { return parameters_; }
  /// The process group.
  ProcessGroup& group() const override { return *group_; }

  /// Joinable: the group.
  ProcessGroup& join_process_group() override { return *group_; }
  /// Joinable: in a round that synchronizes, steps this rank's shard with
  /// the gradients the others averaged and takes part in the all-gather.
  void join_shadow(const JoinRound& round) override;
  /// Joinable: nothing; every step ends with equal parameters everywhere,
  /// and each rank keeps its own shard's state.
  void join_finish(int source) override {}

 private:
  struct ShardedBucket;
  // step() on a rank still training (joined = false) or shadowing one.
  void run_step(bool joined, double divisor);
  // Stage 1: the Join round's divisor (stage 2's start in the first hook).
  double start_round();

  std::vector<at::Tensor> parameters_;
  ZeroRedundancyOptimizerOptions options_;
  std::shared_ptr<ProcessGroup> group_;
  std::vector<std::unique_ptr<ShardedBucket>> buckets_;
  std::shared_ptr<detail::GradientShards> gradients_;  // stage 2
  std::unique_ptr<torch::optim::Optimizer> optimizer_;
};

}  // namespace ddp::parallel

namespace ddp {
using namespace parallel;  // Note [One namespace per layer] in ddp/ddp.hpp
}  // namespace ddp

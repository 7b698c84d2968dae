#pragma once

/// \file sync_batch_norm.hpp
/// Batch normalization over the global batch of all ranks, as PyTorch's
/// `torch.nn.SyncBatchNorm`, built from ordinary tensor operations and
/// ddp's process group (CPU and CUDA).
///
/// \code
///   ConvNet net;                                        // BatchNorm2d inside
///   ddp::nn::convert_sync_batchnorm(net.ptr(), group);      // before DDP and the optimizer
///   ddp::DistributedDataParallel model(net, group);
/// \endcode

#include <ATen/core/Tensor.h>
#include <torch/nn/cloneable.h>
#include <torch/nn/module.h>
#include <torch/nn/options/batchnorm.h>
#include <torch/nn/pimpl.h>

#include <memory>
#include <ostream>

#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::nn {

/// BatchNorm's options: num_features, eps, momentum (nullopt: cumulative
/// average), affine, track_running_stats.
using SyncBatchNormOptions = torch::nn::BatchNormOptions;

/// Batch normalization whose training statistics cover every rank's batch.
/// Accepts (N, C), (N, C, L), (N, C, H, W) and (N, C, D, H, W) inputs.
///
/// Note [Synchronized statistics]
/// In training, each rank sums its count, sum and sum of squares per
/// channel, and one all-reduce of the packed vector (float64, so that the
/// variance E[x^2] - E[x]^2 keeps its digits) gives the global mean and
/// biased variance; ranks may hold different batch sizes, since each weighs
/// in by its count. Backward is the exact gradient of the global
/// normalization: a second all-reduce sums dy and dy * (x - mean) per
/// channel over all ranks. The weight and bias gradients stay local
/// (this rank's share), exactly as a BatchNorm layer's under
/// DistributedDataParallel, whose reduction then combines them. Running
/// statistics follow BatchNorm: the unbiased variance over the global count,
/// momentum (or the cumulative average when it is nullopt), and
/// num_batches_tracked. In eval mode the running statistics are used and
/// nothing is communicated. Every rank must run the same training forward
/// and backward passes, in the same order.
class SyncBatchNormImpl : public torch::nn::Cloneable<SyncBatchNormImpl> {
 public:
  /// A layer over `group`, with BatchNorm's initial values (weight 1, bias
  /// 0, running mean 0, running variance 1).
  /// \throws ConfigError for a null group, num_features < 1, eps <= 0 or a
  ///   momentum outside [0, 1].
  SyncBatchNormImpl(SyncBatchNormOptions options, std::shared_ptr<ProcessGroup> group);
  /// A layer that takes over the parameters and buffers of a batch-norm
  /// layer (the same tensors, shared, not copied), as convert_sync_batchnorm
  /// does; an optimizer built on them keeps working.
  SyncBatchNormImpl(SyncBatchNormOptions options, std::shared_ptr<ProcessGroup> group,
                    const at::Tensor& weight, const at::Tensor& bias,
                    const at::Tensor& running_mean, const at::Tensor& running_var,
                    const at::Tensor& num_batches_tracked);

  /// Normalizes `input` (see the class comment).
  /// \throws InvalidArgumentError for a rank outside 2..5 or a channel count
  ///   other than num_features; for a single value per channel over all
  ///   ranks in training.
  at::Tensor forward(const at::Tensor& input);

  /// Re-creates the parameters and buffers with their initial values.
  void reset() override;
  /// Running mean 0, running variance 1, num_batches_tracked 0.
  void reset_running_stats();
  /// Running statistics reset; weight 1, bias 0.
  void reset_parameters();
  /// Prints `ddp::nn::SyncBatchNorm(C, eps=..., momentum=..., affine=..., ...)`.
  void pretty_print(std::ostream& stream) const override;

  /// The options it was built with.
  SyncBatchNormOptions options;
  /// The group whose ranks share statistics.
  std::shared_ptr<ProcessGroup> group;
  /// Learned scale (undefined unless affine).
  at::Tensor weight;
  /// Learned shift (undefined unless affine).
  at::Tensor bias;
  /// Running mean (undefined unless track_running_stats).
  at::Tensor running_mean;
  /// Running unbiased variance (undefined unless track_running_stats).
  at::Tensor running_var;
  /// Training batches seen (undefined unless track_running_stats).
  at::Tensor num_batches_tracked;

 private:
  void validate() const;
  void register_tensors(const at::Tensor& weight, const at::Tensor& bias,
                        const at::Tensor& running_mean, const at::Tensor& running_var,
                        const at::Tensor& num_batches_tracked);
};

/// Module holder for SyncBatchNormImpl, LibTorch style.
TORCH_MODULE(SyncBatchNorm);

/// Replaces every BatchNorm1d/2d/3d in the tree under `module` by a
/// SyncBatchNorm over `group` with the same options, sharing its weight,
/// bias and running statistics and keeping its training mode. Children of
/// Sequential, ModuleList and ModuleDict containers are replaced in place
/// (what the container's forward calls changes too). Returns `module`, or
/// the new layer when `module` itself is a batch-norm layer. Call it before
/// wrapping the model in DistributedDataParallel.
/// \throws InvalidArgumentError, before changing anything, for a batch-norm
///   layer held by a module that is not one of those containers: C++ cannot
///   re-point that module's member, whose forward would keep calling the
///   old layer. The message names the layer; build such a model with
///   ddp::nn::SyncBatchNorm directly or hold the layer in a Sequential.
std::shared_ptr<torch::nn::Module> convert_sync_batchnorm(std::shared_ptr<torch::nn::Module> module,
                                                          std::shared_ptr<ProcessGroup> group);

}  // namespace ddp::nn

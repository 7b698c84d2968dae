#pragma once

// Internal: the training-mode computation of ddp::nn::SyncBatchNorm as a custom
// autograd function (Note [Synchronized statistics] in
// ddp/nn/sync_batch_norm.hpp).

#include <ATen/core/Tensor.h>

#include <memory>

#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::nn::detail {

/// Normalizes `input` with the mean and variance of the global batch over
/// `group`'s ranks, and updates `running_mean`/`running_var` (when defined)
/// with `average_factor`; differentiable in `input`, `weight` and `bias`.
at::Tensor sync_batch_norm_training(const at::Tensor& input, const at::Tensor& weight,
                                    const at::Tensor& bias, const at::Tensor& running_mean,
                                    const at::Tensor& running_var, double average_factor,
                                    double eps, const std::shared_ptr<ProcessGroup>& group);

}  // namespace ddp::nn::detail

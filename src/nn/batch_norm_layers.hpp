#pragma once

// Internal: recognizing batch-norm layers, which mixed precision keeps in
// float32 at O2 and convert_sync_batchnorm replaces.

#include <torch/nn/module.h>
#include <torch/nn/modules/batchnorm.h>

#include "ddp/nn/sync_batch_norm.hpp"

namespace ddp::nn::detail {

/// Whether `module` is a BatchNorm1d/2d/3d (LibTorch's own layers).
inline bool is_torch_batch_norm(const torch::nn::Module& module) {
  return dynamic_cast<const torch::nn::BatchNorm1dImpl*>(&module) != nullptr ||
         dynamic_cast<const torch::nn::BatchNorm2dImpl*>(&module) != nullptr ||
         dynamic_cast<const torch::nn::BatchNorm3dImpl*>(&module) != nullptr;
}

/// Whether `module` is any batch-norm layer, ddp::nn::SyncBatchNorm included.
inline bool is_batch_norm(const torch::nn::Module& module) {
  return is_torch_batch_norm(module) ||
         dynamic_cast<const nn::SyncBatchNormImpl*>(&module) != nullptr;
}

}  // namespace ddp::nn::detail

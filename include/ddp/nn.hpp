#pragma once

/// \file nn.hpp
/// ddp's modules in one include (namespace ddp::nn, beside torch::nn):
/// SyncBatchNorm and convert_sync_batchnorm.

#include "ddp/nn/checkpoint.hpp"       // IWYU pragma: export
#include "ddp/nn/sync_batch_norm.hpp"  // IWYU pragma: export

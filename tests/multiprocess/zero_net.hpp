#pragma once

// The model of the ZeroRedundancyOptimizer scenarios (zero_checks.cpp,
// zero_snapshot_checks.cpp).

#include <torch/torch.h>

namespace ddp::testing {

/// 8*16 + 16 + 16*4 + 4 = 212 trained elements, so shards of 212 / N cut
/// parameters in the middle; `spare` (20 elements, last) never gets a
/// gradient.
struct ZeroNetImpl : torch::nn::Module {
  ZeroNetImpl()
      : hidden(register_module("hidden", torch::nn::Linear(8, 16))),
        out(register_module("out", torch::nn::Linear(16, 4))),
        spare(register_module("spare", torch::nn::Linear(4, 4))) {}
  torch::Tensor forward(torch::Tensor x) { return out->forward(torch::tanh(hidden->forward(x))); }
  torch::nn::Linear hidden, out, spare;
};
TORCH_MODULE(ZeroNet);

}  // namespace ddp::testing

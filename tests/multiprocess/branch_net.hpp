#pragma once

// A model whose middle branch a forward may skip: the unused-parameter and
// mismatch scenarios of the multi-process tests share it.

#include <torch/torch.h>

namespace ddp::testing {

/// trunk -> (branch, when used) -> head; 8 inputs, 2 outputs.
struct BranchNetImpl : torch::nn::Module {
  BranchNetImpl()
      : trunk(register_module("trunk", torch::nn::Linear(8, 8))),
        branch(register_module("branch", torch::nn::Linear(8, 8))),
        head(register_module("head", torch::nn::Linear(8, 2))) {}
  torch::Tensor forward(torch::Tensor x, bool use_branch) {
    auto h = torch::relu(trunk->forward(x));
    if (use_branch) h = h + torch::relu(branch->forward(h));
    return head->forward(h);
  }
  torch::nn::Linear trunk, branch, head;
};
TORCH_MODULE(BranchNet);

}  // namespace ddp::testing

#pragma once

// The models of FSDP's path checks (fsdp_paths_checks.cpp): blocks run in
// either order, one of them perhaps called directly or failing in backward;
// a siamese encoder (one module under two names); an embedding tied to an
// output layer outside its unit.

#include <torch/torch.h>

#include <stdexcept>

#include "ddp/parallel/fully_sharded_units.hpp"
#include "multiprocess/fsdp_models.hpp"

namespace ddp::testing::fsdp_paths {

namespace nn = torch::nn;
using torch::Tensor;

// Blocks in a ModuleList, run in registration order or reversed; one of
// them may be called directly (the mistake), and a hook on the first
// block's output may throw in backward.
struct BlocksImpl : nn::Module {
  explicit BlocksImpl(int count) {
    for (int i = 0; i < count; ++i) blocks->push_back(nn::Linear(8, 8));
  }
  nn::ModuleList blocks{register_module("blocks", nn::ModuleList())};
  bool reversed = false;
  int direct = -1;  // the block called as block->forward(x)
  bool throw_in_backward = false;
  Tensor forward(Tensor x) {
    for (size_t k = 0; k < blocks->size(); ++k) {
      const size_t i = reversed ? blocks->size() - 1 - k : k;
      auto block = blocks->ptr<nn::LinearImpl>(i);
      x = torch::tanh(static_cast<int>(i) == direct ? block->forward(x) : sharded_call(block, x));
      if (k == 0 && throw_in_backward) {
        x.register_hook(
            [](const Tensor&) -> Tensor { throw std::runtime_error("a failing hook"); });
      }
    }
    return x;
  }
};
TORCH_MODULE(Blocks);

// One Linear registered as "left" and "right" (a siamese encoder), and a head.
struct SiameseImpl : nn::Module {
  nn::Linear encoder{register_module("left", nn::Linear(8, 8))};
  nn::Linear head{register_module("head", nn::Linear(8, 8))};
  SiameseImpl() { register_module("right", encoder); }
  Tensor forward(const Tensor& x) {
    const Tensor a = torch::tanh(sharded_call(encoder, x));
    const Tensor b = torch::tanh(sharded_call(encoder, x.flip({1})));
    return sharded_call(head, a - b);
  }
};
TORCH_MODULE(Siamese);

// An embedding unit whose weight the root's output layer reads too.
struct TiedAcrossImpl : nn::Module {
  nn::Embedding embed{register_module("embed", nn::Embedding(11, 8))};
  fsdp_models::TiedOutput out{register_module("out", fsdp_models::TiedOutput(embed->weight))};
  Tensor forward(const Tensor& tokens) { return out(sharded_call(embed, tokens)); }
};
TORCH_MODULE(TiedAcross);

}  // namespace ddp::testing::fsdp_paths

#pragma once

// The models FullyShardedDataParallel's checks train (fsdp_checks.cpp), each
// with a one-process twin: an MLP in Sequential whose sizes do not divide by
// 2, 3 or 4, a custom module as one unit, a branch some ranks skip, a
// ModuleList of transformer blocks with tied embeddings, a CNN with
// BatchNorm.

#include <torch/torch.h>

#include <cstdint>
#include <vector>

#include "ddp/parallel/fully_sharded_units.hpp"

namespace ddp::testing::fsdp_models {

namespace nn = torch::nn;
using torch::Tensor;

// Sizes that do not divide by 2, 3 or 4: every unit's shard is padded.
inline nn::Sequential make_mlp(uint64_t seed, int64_t hidden = 13) {
  torch::manual_seed(seed);
  return nn::Sequential(nn::Linear(7, hidden), nn::ReLU(), nn::Linear(hidden, 9), nn::Tanh(),
                        nn::Linear(9, 5));
}

struct TwoLayerImpl : nn::Module {
  nn::Linear a{register_module("a", nn::Linear(7, 11))};
  nn::Linear b{register_module("b", nn::Linear(11, 5))};
  Tensor forward(Tensor x) { return b(torch::gelu(a(x))); }
};
TORCH_MODULE(TwoLayer);

// A branch some ranks take on some steps; every Linear is a unit.
struct BranchyImpl : nn::Module {
  nn::Linear trunk{register_module("trunk", nn::Linear(7, 12))};
  nn::Linear branch{register_module("branch", nn::Linear(12, 12))};
  nn::Linear head{register_module("head", nn::Linear(12, 5))};
  bool take_branch = true;
  Tensor forward(const Tensor& x) {
    Tensor h = torch::relu(sharded_call(trunk, x));
    if (take_branch) h = h + torch::tanh(sharded_call(branch, h));
    return sharded_call(head, h);
  }
};
TORCH_MODULE(Branchy);

inline bool branch_taken(int step, int rank) { return (step + rank) % 3 == 0; }

// A transformer block: attention and an MLP, each after a layer norm.
struct BlockImpl : nn::Module {
  nn::LayerNorm norm1{register_module("norm1", nn::LayerNorm(nn::LayerNormOptions({8})))};
  nn::MultiheadAttention attention{
      register_module("attention", nn::MultiheadAttention(nn::MultiheadAttentionOptions(8, 2)))};
  nn::LayerNorm norm2{register_module("norm2", nn::LayerNorm(nn::LayerNormOptions({8})))};
  nn::Linear up{register_module("up", nn::Linear(8, 16))};
  nn::Linear down{register_module("down", nn::Linear(16, 8))};
  Tensor forward(Tensor x) {  // x: (length, batch, 8)
    Tensor h = norm1(x);
    x = x + std::get<0>(attention(h, h, h));
    return x + down(torch::gelu(up(norm2(x))));
  }
};
TORCH_MODULE(Block);

// The output projection, its weight the embedding's (registered under both names).
struct TiedOutputImpl : nn::Module {
  explicit TiedOutputImpl(const Tensor& shared) : weight(register_parameter("weight", shared)) {}
  Tensor forward(const Tensor& x) { return torch::matmul(x, weight.t()); }
  Tensor weight;
};
TORCH_MODULE(TiedOutput);

// Tokens (batch, length) -> logits (batch, length, 11); the blocks in a
// ModuleList, each run through sharded_call (the one-line change).
struct TinyLmImpl : nn::Module {
  nn::Embedding embed{register_module("embed", nn::Embedding(11, 8))};
  nn::ModuleList blocks{register_module("blocks", nn::ModuleList(Block(), Block()))};
  TiedOutput head{register_module("head", TiedOutput(embed->weight))};
  Tensor forward(const Tensor& tokens) {
    Tensor x = embed(tokens).transpose(0, 1);
    for (const auto& block : *blocks) {
      auto b = std::dynamic_pointer_cast<BlockImpl>(block);
      x = sharded_call(b, x);
    }
    return head(x.transpose(0, 1));
  }
};
TORCH_MODULE(TinyLm);

// zero_grad(set_to_none=true), which LibTorch 1.13's zero_grad() is not.
inline void clear_gradients(const std::vector<Tensor>& parameters) {
  for (auto p : parameters) p.mutable_grad() = Tensor();
}

// The parameters once each (a tied one is listed under two names).
inline std::vector<Tensor> distinct(const std::vector<Tensor>& parameters) {
  std::vector<Tensor> result;
  for (const auto& p : parameters) {
    bool seen = false;
    for (const auto& r : result) seen |= r.unsafeGetTensorImpl() == p.unsafeGetTensorImpl();
    if (!seen) result.push_back(p);
  }
  return result;
}

inline nn::Sequential make_cnn(uint64_t seed) {
  torch::manual_seed(seed);
  return nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 4, 3)), nn::BatchNorm2d(4), nn::ReLU(),
                        nn::Flatten(), nn::Linear(64, 5));
}

}  // namespace ddp::testing::fsdp_models

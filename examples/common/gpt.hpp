#pragma once

// A decoder-only transformer (GPT-style) for byte-level language modelling,
// written for FullyShardedDataParallel: its blocks are built through
// ddp::shard_as_built (sharded as built under a ddp::ShardedConstruction,
// plain otherwise) and run through ddp::nn::checkpoint or ddp::sharded_call
// (plain calls outside FSDP). Shared by example_gpt_fortunes, the
// FsdpTransformer test and fsdp_transformer_bench; examples/gpt_reference.py
// is the same model in plain PyTorch, with the same parameter names.

#include <torch/torch.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "ddp/nn/checkpoint.hpp"
#include "ddp/parallel/fully_sharded_units.hpp"
#include "ddp/parallel/sharded_construction.hpp"

namespace ddp::examples {

struct GptConfig {
  int64_t vocabulary = 256;  // bytes
  int64_t context = 64;      // positions
  int64_t width = 128;
  int64_t heads = 4;
  int64_t layers = 4;
  double dropout = 0.1;
  /// Run each block through ddp::nn::checkpoint.
  bool checkpointed = false;

  /// Parameters: the embeddings, each block's 12 w^2 + 13 w, the final norm.
  int64_t parameter_count() const {
    return (vocabulary + context) * width + layers * (12 * width * width + 13 * width) + 2 * width;
  }
};

/// GPT-2's initialization: weights normal with std 0.02, biases zero, norms one.
inline void init_gpt_linear(torch::nn::Linear& linear) {
  torch::NoGradGuard no_grad;
  linear->weight.normal_(0.0, 0.02);
  linear->bias.zero_();
}

/// A pre-norm block: causal self-attention, then an MLP of 4 w, each added
/// to the residual stream after dropout. Input and output (batch, length, w).
struct GptBlockImpl : torch::nn::Module {
  explicit GptBlockImpl(const GptConfig& config)
      : heads(config.heads),
        norm1(register_module("norm1",
                              torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.width})))),
        qkv(register_module("qkv", torch::nn::Linear(config.width, 3 * config.width))),
        proj(register_module("proj", torch::nn::Linear(config.width, config.width))),
        norm2(register_module("norm2",
                              torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.width})))),
        up(register_module("up", torch::nn::Linear(config.width, 4 * config.width))),
        down(register_module("down", torch::nn::Linear(4 * config.width, config.width))),
        dropout(register_module("dropout", torch::nn::Dropout(config.dropout))) {
    for (auto* linear : {&qkv, &proj, &up, &down}) init_gpt_linear(*linear);
  }

  torch::Tensor forward(torch::Tensor x) {
    const int64_t batch = x.size(0), length = x.size(1), width = x.size(2);
    const int64_t head_width = width / heads;
    auto split = [&](const torch::Tensor& t) {  // (batch, heads, length, head_width)
      return t.reshape({batch, length, heads, head_width}).transpose(1, 2);
    };
    const auto parts = qkv(norm1(x)).chunk(3, /*dim=*/-1);
    const torch::Tensor q = split(parts[0]), k = split(parts[1]), v = split(parts[2]);
    torch::Tensor scores = torch::matmul(q, k.transpose(-2, -1)) / std::sqrt(double(head_width));
    const torch::Tensor future =
        torch::ones({length, length}, torch::TensorOptions().dtype(torch::kBool)).triu(1);
    scores = scores.masked_fill(future, -std::numeric_limits<float>::infinity());
    const torch::Tensor attended = torch::matmul(torch::softmax(scores, -1), v)
                                       .transpose(1, 2)
                                       .reshape({batch, length, width});
    x = x + dropout(proj(attended));
    return x + dropout(down(torch::gelu(up(norm2(x)))));
  }

  int64_t heads;
  torch::nn::LayerNorm norm1;
  torch::nn::Linear qkv, proj;
  torch::nn::LayerNorm norm2;
  torch::nn::Linear up, down;
  torch::nn::Dropout dropout;
};
TORCH_MODULE(GptBlock);

/// Token and position embeddings, the blocks, a final norm, and the output
/// head tied to the token embedding (logits = h E^T). Tokens (batch,
/// length <= context) -> logits (batch, length, vocabulary). The
/// embeddings and the final norm are FSDP's root unit, each block a unit.
struct GptImpl : torch::nn::Module {
  explicit GptImpl(const GptConfig& config)
      : config(config),
        token(register_module("token", torch::nn::Embedding(config.vocabulary, config.width))),
        position(register_module("position", torch::nn::Embedding(config.context, config.width))),
        dropout(register_module("dropout", torch::nn::Dropout(config.dropout))) {
    {
      torch::NoGradGuard no_grad;
      token->weight.normal_(0.0, 0.02);
      position->weight.normal_(0.0, 0.02);
    }
    for (int64_t l = 0; l < config.layers; ++l) {
      // Sharded as soon as built under a ddp::ShardedConstruction.
      blocks.push_back(
          register_module("block" + std::to_string(l), ddp::shard_as_built(GptBlock(config))));
    }
    norm =
        register_module("norm", torch::nn::LayerNorm(torch::nn::LayerNormOptions({config.width})));
  }

  torch::Tensor forward(const torch::Tensor& tokens) {
    const int64_t length = tokens.size(1);
    TORCH_CHECK(length <= config.context, "GptImpl: a sequence of ", length,
                " tokens is longer than the context of ", config.context);
    torch::Tensor h = dropout(token(tokens) + position(torch::arange(length, tokens.options())));
    for (auto& block : blocks) {
      h = config.checkpointed ? ddp::nn::checkpoint(block, h) : ddp::sharded_call(block, h);
    }
    h = norm(h);
    return torch::matmul(h, token->weight.to(h.scalar_type()).t());
  }

  GptConfig config;
  torch::nn::Embedding token, position;
  torch::nn::Dropout dropout;
  std::vector<GptBlock> blocks;
  torch::nn::LayerNorm norm{nullptr};
};
TORCH_MODULE(Gpt);

}  // namespace ddp::examples

#pragma once

// Random models for FullyShardedDataParallel (issue #54, what to build
// point 2): from a seed, a stack of the layers users have (Linear,
// Embedding, LayerNorm, BatchNorm, Conv, LSTM, GRU, attention) with random
// units, frozen units, a tied head, blocks called twice, branches some
// ranks skip, another forward order, and random options. The same seed
// builds the same model on every rank and in the one-process reference.

#include <torch/torch.h>

#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "ddp/parallel/fully_sharded_units.hpp"

namespace ddp::testing::fsdp_generated {

namespace nn = torch::nn;
using torch::Tensor;

enum class Layer { kLinear, kLayerNorm, kBatchNorm, kConv, kLstm, kGru, kAttention };

struct BlockSpec {
  Layer layer = Layer::kLinear;
  bool unit = false;    // picked by the wrap policy
  bool frozen = false;  // every parameter frozen
  bool twice = false;   // called twice in each forward
  bool branch = false;  // some ranks skip it in some steps (h + block(h))
};

/// Everything a seed decides.
struct ModelSpec {
  uint64_t seed = 0;
  int64_t width = 8;
  bool tokens = false;      // an Embedding first, else a Linear
  bool embed_unit = false;  // the Embedding (or input Linear) a unit
  bool tied = false;        // the head reads the Embedding's weight
  std::vector<BlockSpec> blocks;
  std::vector<int> order;  // the order the forward runs the blocks in
  int prefetch = 1;
  bool reshard_after_forward = true;
  bool find_unused_units = false;
  bool bf16 = false;
  int micro_batches = 1;  // more: no_sync() for all but the last
  bool clip = false;
  bool adamw = false;
  /// What the spec should get: none (train as one process), or a
  /// ConfigError at construction with one of these (the first mistake
  /// FullyShardedDataParallel finds).
  std::vector<std::string> refusals;
  std::string describe() const;
};

ModelSpec make_spec(uint64_t seed);

constexpr int64_t kVocab = 11;
constexpr int64_t kLength = 3;  // positions per row
constexpr int64_t kOut = 5;

/// One block: its layer on (rows, kLength, width) activations.
struct GeneratedBlockImpl : nn::Module {
  GeneratedBlockImpl(Layer layer, int64_t width);
  Tensor forward(const Tensor& x);
  Layer layer;
  std::shared_ptr<nn::Module> inner;
};
TORCH_MODULE(GeneratedBlock);

/// The model: input layer, blocks, head. `takes(b)` says whether this
/// process runs branch block b for all of its rows; a reference running
/// every rank's rows passes `row_mask(b)`, 1 for the rows whose rank takes
/// it (all zeros: not run).
struct GeneratedNetImpl : nn::Module {
  explicit GeneratedNetImpl(const ModelSpec& spec);
  Tensor forward(const Tensor& input, const std::vector<Tensor>& branch_masks);
  ModelSpec spec;
  nn::Embedding embed{nullptr};
  nn::Linear input{nullptr};
  nn::ModuleList blocks;
  nn::Linear head{nullptr};
};
TORCH_MODULE(GeneratedNet);

/// The wrap policy of `spec`: its unit blocks, and the input layer.
WrapPolicy generated_policy(const ModelSpec& spec);

}  // namespace ddp::testing::fsdp_generated

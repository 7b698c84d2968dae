#include "multiprocess/fsdp_generated_models.hpp"

#include <algorithm>
#include <numeric>
#include <tuple>

#include "multiprocess/fsdp_models.hpp"

namespace ddp::testing::fsdp_generated {
namespace {

const char* layer_name(Layer layer) {
  switch (layer) {
    case Layer::kLinear:
      return "Linear";
    case Layer::kLayerNorm:
      return "LayerNorm";
    case Layer::kBatchNorm:
      return "BatchNorm1d";
    case Layer::kConv:
      return "Conv1d";
    case Layer::kLstm:
      return "LSTM";
    case Layer::kGru:
      return "GRU";
    case Layer::kAttention:
      return "MultiheadAttention";
  }
  return "?";
}

}  // namespace

ModelSpec make_spec(uint64_t seed) {
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ULL + 1);
  auto chance = [&](double p) { return std::uniform_real_distribution<double>(0, 1)(rng) < p; };
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  ModelSpec spec;
  spec.seed = seed;
  spec.width = std::vector<int64_t>{6, 8, 10}[pick(3)];
  spec.tokens = chance(0.5);
  spec.embed_unit = chance(0.4);
  spec.tied = spec.tokens && chance(0.4);
  const int count = 2 + pick(4);
  bool branches = false;
  for (int b = 0; b < count; ++b) {
    BlockSpec block;
    block.layer = static_cast<Layer>(pick(7));
    block.unit = chance(0.6);
    block.frozen = chance(block.unit ? 0.15 : 0.04);
    block.twice = chance(0.15);
    block.branch = !block.twice &&
                   (block.layer == Layer::kLinear || block.layer == Layer::kLayerNorm) &&
                   chance(0.35);
    branches = branches || block.branch;
    spec.blocks.push_back(block);
  }
  spec.order.resize(count);
  std::iota(spec.order.begin(), spec.order.end(), 0);
  if (chance(0.3)) std::shuffle(spec.order.begin(), spec.order.end(), rng);
  spec.prefetch = pick(3);
  spec.reshard_after_forward = chance(0.7);
  spec.find_unused_units = branches || chance(0.3);
  spec.bf16 = chance(0.15);
  spec.micro_batches = chance(0.25) ? 2 : 1;
  spec.clip = chance(0.25);
  spec.adamw = chance(0.5);
  if (spec.tied && spec.embed_unit) spec.refusals.push_back("a tie between a unit and the root");
  for (const auto& block : spec.blocks) {
    if (block.frozen && !block.unit) {
      spec.refusals.push_back("mixes trainable and frozen parameters");
      break;
    }
  }
  return spec;
}

std::string ModelSpec::describe() const {
  std::string text = "seed " + std::to_string(seed) + ": width " + std::to_string(width) +
                     (tokens ? ", Embedding" : ", Linear") + (embed_unit ? " (unit)" : "") +
                     (tied ? ", tied head" : "") + "; blocks";
  for (size_t b = 0; b < blocks.size(); ++b) {
    const BlockSpec& s = blocks[b];
    text += std::string(b ? ", " : " ") + layer_name(s.layer) + (s.unit ? " unit" : "") +
            (s.frozen ? " frozen" : "") + (s.twice ? " twice" : "") + (s.branch ? " branch" : "");
  }
  text += "; order";
  for (int b : order) text += " " + std::to_string(b);
  text += "; prefetch " + std::to_string(prefetch) +
          (reshard_after_forward ? "" : ", no reshard after forward") +
          (find_unused_units ? ", find_unused_units" : "") + (bf16 ? ", bf16" : "") +
          (micro_batches > 1 ? ", no_sync" : "") + (clip ? ", clipping" : "") +
          (adamw ? ", AdamW" : ", SGD");
  return text;
}

GeneratedBlockImpl::GeneratedBlockImpl(Layer layer_, int64_t width) : layer(layer_) {
  switch (layer) {
    case Layer::kLinear:
      inner = nn::Sequential(nn::Linear(width, width)).ptr();
      break;
    case Layer::kLayerNorm:
      inner = nn::Sequential(nn::LayerNorm(nn::LayerNormOptions({width}))).ptr();
      break;
    case Layer::kBatchNorm:
      inner = nn::Sequential(nn::BatchNorm1d(width)).ptr();
      break;
    case Layer::kConv:
      inner = nn::Sequential(nn::Conv1d(nn::Conv1dOptions(width, width, 3).padding(1))).ptr();
      break;
    case Layer::kLstm:
      inner = nn::LSTM(nn::LSTMOptions(width, width).batch_first(true)).ptr();
      break;
    case Layer::kGru:
      inner = nn::GRU(nn::GRUOptions(width, width).batch_first(true)).ptr();
      break;
    case Layer::kAttention:
      inner = nn::MultiheadAttention(width, 2).ptr();
      break;
  }
  register_module("layer", inner);
}

Tensor GeneratedBlockImpl::forward(const Tensor& x) {
  // The registered child, which convert_sync_batchnorm may have replaced
  // inside the Sequential.
  switch (layer) {
    case Layer::kLinear:
    case Layer::kLayerNorm:
      return std::dynamic_pointer_cast<nn::SequentialImpl>(inner)->forward(x);
    case Layer::kBatchNorm:
    case Layer::kConv:
      return std::dynamic_pointer_cast<nn::SequentialImpl>(inner)
          ->forward(x.transpose(1, 2))
          .transpose(1, 2);
    case Layer::kLstm:
      return std::get<0>(std::dynamic_pointer_cast<nn::LSTMImpl>(inner)->forward(x));
    case Layer::kGru:
      return std::get<0>(std::dynamic_pointer_cast<nn::GRUImpl>(inner)->forward(x));
    case Layer::kAttention: {
      const Tensor q = x.transpose(0, 1);
      return std::get<0>(
                 std::dynamic_pointer_cast<nn::MultiheadAttentionImpl>(inner)->forward(q, q, q))
          .transpose(0, 1);
    }
  }
  return x;
}

GeneratedNetImpl::GeneratedNetImpl(const ModelSpec& spec_) : spec(spec_) {
  torch::manual_seed(spec.seed);
  if (spec.tokens) {
    embed = register_module("embed", nn::Embedding(kVocab, spec.width));
  } else {
    input = register_module("input", nn::Linear(4, spec.width));
  }
  blocks = register_module("blocks", nn::ModuleList());
  for (const auto& block : spec.blocks) {
    blocks->push_back(GeneratedBlock(block.layer, spec.width));
    if (block.frozen) {
      for (auto& p : blocks[blocks->size() - 1]->parameters()) p.set_requires_grad(false);
    }
  }
  if (spec.tied) {
    register_module("head", fsdp_models::TiedOutput(embed->weight));
  } else {
    head = register_module("head", nn::Linear(spec.width, kOut));
  }
}

Tensor GeneratedNetImpl::forward(const Tensor& x, const std::vector<Tensor>& branch_masks) {
  Tensor h = spec.tokens ? sharded_call(embed, x) : torch::tanh(sharded_call(input, x));
  for (int b : spec.order) {
    auto block = blocks->ptr<GeneratedBlockImpl>(b);
    if (spec.blocks[b].branch) {
      const Tensor& mask = branch_masks.at(b);
      // The mask in the activations' dtype (bf16 under a param_dtype): an
      // fp32 product would reach the root's bf16 layers.
      if (mask.defined()) h = h + mask.to(h.scalar_type()) * sharded_call(block, h);
      continue;
    }
    for (int call = 0; call < (spec.blocks[b].twice ? 2 : 1); ++call) {
      h = torch::tanh(sharded_call(block, h));
    }
  }
  if (spec.tied) return named_children()["head"]->as<fsdp_models::TiedOutputImpl>()->forward(h);
  return head(h);
}

WrapPolicy generated_policy(const ModelSpec& spec) {
  std::set<std::string> units;
  if (spec.embed_unit) units.insert(spec.tokens ? "embed" : "input");
  for (size_t b = 0; b < spec.blocks.size(); ++b) {
    if (spec.blocks[b].unit) units.insert("blocks." + std::to_string(b));
  }
  return [units](const std::string& name, const nn::Module&) { return units.count(name) > 0; };
}

}  // namespace ddp::testing::fsdp_generated

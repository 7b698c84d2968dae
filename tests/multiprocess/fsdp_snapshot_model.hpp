#pragma once

// The model, optimizer and data of the FSDP snapshot scenarios
// (fsdp_snapshot_checks.cpp, fsdp_dcp_checks.cpp), and of their Python peer
// (dcp_peer.py, which defines the same).

#include <torch/torch.h>

#include <string>
#include <utility>
#include <vector>

#include "ddp/formats/py_value.hpp"

namespace ddp::testing::fsdp_snapshot_model {

namespace nn = torch::nn;
namespace optim = torch::optim;

inline constexpr int64_t kFsdpSnapshotBatch = 12;  // divides evenly over 1, 2 and 3 ranks
inline constexpr int kFsdpSavedSteps = 4;
inline constexpr int kFsdpSteps = 8;
inline constexpr uint64_t kSavedSeed = 31;

inline std::pair<torch::Tensor, torch::Tensor> fsdp_batch_of(int step) {
  torch::manual_seed(700 + step);
  return {torch::randn({kFsdpSnapshotBatch, 7}), torch::randn({kFsdpSnapshotBatch, 5})};
}

// A parameter-free layer with a buffer: forward calls so far.
struct CallCounterImpl : nn::Module {
  CallCounterImpl() { calls = register_buffer("calls", torch::zeros({1}, torch::kLong)); }
  torch::Tensor forward(const torch::Tensor& x) {
    calls.add_(1);
    return x;
  }
  torch::Tensor calls;
};
TORCH_MODULE(CallCounter);

// Sizes that do not divide by 2 or 3: every unit's shard is padded.
inline nn::Sequential make_net(uint64_t seed) {
  torch::manual_seed(seed);
  return nn::Sequential(nn::Linear(7, 13), CallCounter(), nn::ReLU(), nn::Linear(13, 9), nn::Tanh(),
                        nn::Linear(9, 5));
}

// The fine-tuning recipe: the first Linear frozen (its own unit under
// FSDP's default policy), the optimizer over the trainable parameters only
// (frozen_optimizer_checks.cpp; dcp_peer.py's "frozen").
inline nn::Sequential make_frozen_net(uint64_t seed) {
  nn::Sequential net = make_net(seed);
  for (auto& p : net[0]->parameters()) p.requires_grad_(false);
  return net;
}

// The parameters of `named` that require a gradient.
inline torch::OrderedDict<std::string, torch::Tensor> trainable(
    const torch::OrderedDict<std::string, torch::Tensor>& named) {
  torch::OrderedDict<std::string, torch::Tensor> result;
  for (const auto& item : named) {
    if (item.value().requires_grad()) result.insert(item.key(), item.value());
  }
  return result;
}

inline optim::AdamWOptions adamw_options() { return optim::AdamWOptions(1e-2).weight_decay(0.1); }

// A transformer recipe's two param groups: weight decay on the weights,
// none on the biases (by name).
inline std::vector<optim::OptimizerParamGroup> decay_groups(
    const torch::OrderedDict<std::string, torch::Tensor>& named) {
  std::vector<torch::Tensor> decay, no_decay;
  for (const auto& item : named) {
    const bool bias = item.key().size() >= 4 && item.key().substr(item.key().size() - 4) == "bias";
    (bias ? no_decay : decay).push_back(item.value());
  }
  std::vector<optim::OptimizerParamGroup> groups;
  groups.emplace_back(decay, std::make_unique<optim::AdamWOptions>(adamw_options()));
  groups.emplace_back(no_decay,
                      std::make_unique<optim::AdamWOptions>(adamw_options().weight_decay(0)));
  return groups;
}

// The values of a full_parameters() dict, in its order.
inline std::vector<torch::Tensor> values_of(
    const torch::OrderedDict<std::string, at::Tensor>& dict) {
  std::vector<torch::Tensor> values;
  for (const auto& item : dict) values.push_back(item.value());
  return values;
}

// The tensors of a list read from a torch.save file.
inline std::vector<torch::Tensor> tensors_of(const formats::PyValue& list) {
  std::vector<torch::Tensor> tensors;
  for (const auto& item : list.items) tensors.push_back(item->tensor);
  return tensors;
}

inline bool all_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  bool equal = a.size() == b.size();
  for (size_t i = 0; equal && i < a.size(); ++i) equal = torch::equal(a[i], b[i]);
  return equal;
}

}  // namespace ddp::testing::fsdp_snapshot_model

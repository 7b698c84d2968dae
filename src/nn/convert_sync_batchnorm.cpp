#include <torch/torch.h>

#include <map>
#include <string>
#include <vector>

#include "ddp/base/errors.hpp"
#include "ddp/nn/sync_batch_norm.hpp"
#include "nn/batch_norm_layers.hpp"

namespace ddp::nn {
namespace {

// A batch-norm layer found in the tree: its parent and its name there.
struct Found {
  torch::nn::Module* parent;
  std::string name;
  std::string path;
  std::shared_ptr<torch::nn::Module> layer;
};

bool is_container(const torch::nn::Module& module) {
  return dynamic_cast<const torch::nn::SequentialImpl*>(&module) != nullptr ||
         dynamic_cast<const torch::nn::ModuleListImpl*>(&module) != nullptr ||
         dynamic_cast<const torch::nn::ModuleDictImpl*>(&module) != nullptr;
}

void collect(torch::nn::Module& parent, const std::string& prefix, std::vector<Found>& found) {
  for (const auto& child : parent.named_children()) {
    const std::string path = prefix + child.key();
    if (detail::is_torch_batch_norm(*child.value())) {
      if (!is_container(parent)) {
        throw InvalidArgumentError(
            "convert_sync_batchnorm: the batch-norm layer '" + path + "' is a child of a " +
            parent.name() +
            ", which is not a Sequential, ModuleList or ModuleDict; its forward "
            "calls the layer through a C++ member that cannot be re-pointed, so it would keep "
            "running unsynchronized. Build that module with ddp::nn::SyncBatchNorm, or hold the "
            "layer in a Sequential. Nothing was converted.");
      }
      found.push_back({&parent, child.key(), path, child.value()});
    } else {
      collect(*child.value(), path + ".", found);
    }
  }
}

template <typename BatchNormImpl>
bool try_convert(const std::shared_ptr<torch::nn::Module>& layer,
                 const std::shared_ptr<ProcessGroup>& group, SyncBatchNorm& result) {
  auto* bn = dynamic_cast<BatchNormImpl*>(layer.get());
  if (bn == nullptr) return false;
  result = SyncBatchNorm(bn->options, group, bn->weight, bn->bias, bn->running_mean,
                         bn->running_var, bn->num_batches_tracked);
  result->train(bn->is_training());
  return true;
}

SyncBatchNorm convert_layer(const std::shared_ptr<torch::nn::Module>& layer,
                            const std::shared_ptr<ProcessGroup>& group) {
  SyncBatchNorm result{nullptr};
  if (try_convert<torch::nn::BatchNorm1dImpl>(layer, group, result) ||
      try_convert<torch::nn::BatchNorm2dImpl>(layer, group, result) ||
      try_convert<torch::nn::BatchNorm3dImpl>(layer, group, result)) {
    return result;
  }
  throw InvalidArgumentError("convert_sync_batchnorm: " + layer->name() +
                             " is not a BatchNorm1d/2d/3d");
}

// Re-points the container's own list (what its forward uses) and its
// registered child.
void replace_in_container(torch::nn::Module& parent, const std::string& name,
                          const std::shared_ptr<torch::nn::Module>& old_layer,
                          const SyncBatchNorm& layer) {
  if (auto* sequential = dynamic_cast<torch::nn::SequentialImpl*>(&parent)) {
    for (auto& entry : *sequential) {
      if (entry.ptr() == old_layer) entry = torch::nn::AnyModule(layer);
    }
  } else if (auto* list = dynamic_cast<torch::nn::ModuleListImpl*>(&parent)) {
    for (auto& entry : *list) {
      if (entry == old_layer) entry = layer.ptr();
    }
  } else if (auto* dict = dynamic_cast<torch::nn::ModuleDictImpl*>(&parent)) {
    for (auto& entry : *dict) {
      if (entry.value() == old_layer) entry.value() = layer.ptr();
    }
  }
  parent.replace_module(name, layer.ptr());
}

}  // namespace

std::shared_ptr<torch::nn::Module> convert_sync_batchnorm(std::shared_ptr<torch::nn::Module> module,
                                                          std::shared_ptr<ProcessGroup> group) {
  if (!module) throw InvalidArgumentError("convert_sync_batchnorm: the module is null");
  if (!group) {
    throw ConfigError(
        "convert_sync_batchnorm: the process group is null; pass the group "
        "returned by ddp::init()");
  }
  if (detail::is_torch_batch_norm(*module)) return convert_layer(module, group).ptr();
  std::vector<Found> found;
  collect(*module, "", found);  // throws before anything changes
  std::map<torch::nn::Module*, SyncBatchNorm>
      converted;  // a layer shared by two parents stays shared
  for (const auto& item : found) {
    auto it = converted.find(item.layer.get());
    if (it == converted.end()) {
      it = converted.emplace(item.layer.get(), convert_layer(item.layer, group)).first;
    }
    replace_in_container(*item.parent, item.name, item.layer, it->second);
  }
  return module;
}

}  // namespace ddp::nn

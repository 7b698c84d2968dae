// Exporting a training state or a snapshot for PyTorch (Note [A checkpoint
// for PyTorch] in ddp/snapshot/pytorch_checkpoint.hpp); importing is
// pytorch_import.cpp.

#include "ddp/snapshot/pytorch_checkpoint.hpp"

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <nlohmann/json.hpp>

#include <map>
#include <set>

#include "base/str.hpp"
#include "ddp/formats/py_value.hpp"
#include "ddp/formats/safetensors_file.hpp"
#include "ddp/formats/torch_file.hpp"
#include "ddp/parallel/data_parallel.hpp"
#include "ddp/parallel/distributed_data_parallel.hpp"
#include "snapshot/format_errors.hpp"
#include "snapshot/optimizer_state.hpp"
#include "snapshot/pytorch_optimizer.hpp"
#include "snapshot/sharded_state.hpp"
#include "snapshot/snapshot_format.hpp"
#include "snapshot/state_records.hpp"

namespace ddp::snapshot {
namespace {

using detail::TensorMap;
using formats::NamedTensors;
using formats::PyRef;
using formats::PyValue;
using nlohmann::json;
using Kind = PyValue::Kind;

void collect_state_dict(const torch::nn::Module& module, const std::string& prefix,
                        NamedTensors& out) {
  for (const auto& item : module.named_parameters(/*recurse=*/false)) {
    if (item.value().defined()) out.emplace_back(prefix + item.key(), item.value());
  }
  for (const auto& item : module.named_buffers(/*recurse=*/false)) {
    if (item.value().defined()) out.emplace_back(prefix + item.key(), item.value());
  }
  for (const auto& child : module.named_children()) {
    collect_state_dict(*child.value(), prefix + child.key() + ".", out);
  }
}

// The module a DistributedDataParallel or DataParallel wrapper holds, so
// that the keys are the model's own, as Python's `model.module.state_dict()`
// gives them and `load_state_dict` of the plain model expects.
const torch::nn::Module* unwrapped(const torch::nn::Module* model) {
  if (const auto* ddp = dynamic_cast<const parallel::DistributedDataParallelImpl*>(model)) {
    return ddp->module().get();
  }
  if (const auto* dp = dynamic_cast<const parallel::DataParallelImpl*>(model))
    return dp->module().get();
  return model;
}

// What an export writes, gathered from a live state or a snapshot file.
struct ExportContent {
  NamedTensors model;
  json scalars;    // epoch, step_in_epoch, samples_in_epoch, counters, metadata
  json optimizer;  // the snapshot's optimizer description, or null
  TensorMap optimizer_tensors;
  NamedTensors extra;
};

PyRef tensor_dict(const NamedTensors& tensors) {
  auto dict = PyValue::dict();
  for (const auto& [name, tensor] : tensors) dict->set(name, PyValue::of(tensor));
  return dict;
}

void write_export(const ExportContent& content, const std::string& path, CheckpointFormat format) {
  const json& s = content.scalars;
  if (format == CheckpointFormat::kSafetensors) {
    std::map<std::string, std::string> metadata = {{"format", "pt"}};
    for (const char* key : {"epoch", "step_in_epoch", "samples_in_epoch"}) {
      metadata[key] = std::to_string(s.at(key).get<int64_t>());
    }
    detail::as_snapshot_error([&] { formats::write_safetensors(path, content.model, metadata); });
    return;
  }
  auto root = PyValue::dict();
  root->set("model", tensor_dict(content.model));
  if (!content.optimizer.is_null()) {
    root->set("optimizer",
              detail::optimizer_to_pytorch(content.optimizer, content.optimizer_tensors));
  }
  for (const char* key : {"epoch", "step_in_epoch", "samples_in_epoch"}) {
    root->set(key, PyValue::of(s.at(key).get<int64_t>()));
  }
  if (!s.at("counters").empty()) {
    auto counters = PyValue::dict();
    for (const auto& item : s.at("counters").items()) {
      counters->set(item.key(), PyValue::of(item.value().get<int64_t>()));
    }
    root->set("counters", counters);
  }
  if (!s.at("metadata").empty()) {
    auto metadata = PyValue::dict();
    for (const auto& item : s.at("metadata").items()) {
      metadata->set(item.key(), PyValue::of(item.value().get<std::string>()));
    }
    root->set("metadata", metadata);
  }
  if (!content.extra.empty()) root->set("extra", tensor_dict(content.extra));
  detail::as_snapshot_error([&] { formats::write_torch_file(path, *root); });
}

}  // namespace

CheckpointFormat parse_checkpoint_format(const std::string& name) {
  if (name == "torch") return CheckpointFormat::kTorch;
  if (name == "safetensors") return CheckpointFormat::kSafetensors;
  throw ConfigError("checkpoint format '" + name + "' is unknown; use torch or safetensors");
}

std::vector<std::pair<std::string, at::Tensor>> state_dict(const torch::nn::Module& module) {
  NamedTensors out;
  collect_state_dict(module, "", out);
  return out;
}

void export_checkpoint(const TrainingState& state, const std::string& path,
                       CheckpointFormat format) {
  if (detail::sharded_part(state) != nullptr) {
    throw SnapshotError(
        "export_checkpoint: the state is sharded (zero_optimizer or fully_sharded), so no rank "
        "holds all of it; write the full model with save_consolidated() and export that file");
  }
  ExportContent content;
  if (state.model) content.model = state_dict(*unwrapped(state.model));
  content.scalars = detail::position_scalars(state);
  if (state.optimizer) {
    content.optimizer = detail::export_optimizer(*state.optimizer, content.optimizer_tensors);
  }
  content.extra.assign(state.extra_tensors.begin(), state.extra_tensors.end());
  write_export(content, path, format);
}

void export_checkpoint(const SnapshotFile& file, const std::string& path, CheckpointFormat format) {
  json scalars;
  try {
    scalars = json::parse(file.scalars_json);
  } catch (const json::exception& e) {
    throw SnapshotError("cannot export " + file.path + ": its scalars record is not JSON");
  }
  for (const char* sharded : {"zero", "fully_sharded"}) {
    if (scalars.contains(sharded)) {
      throw SnapshotError("cannot export " + file.path + ": it is a sharded snapshot (" + sharded +
                          "), whose state lives in its shard files; write the full model "
                          "with save_consolidated() and export that file");
    }
  }
  ExportContent content;
  content.scalars = {{"epoch", scalars.value("epoch", int64_t{0})},
                     {"step_in_epoch", scalars.value("step_in_epoch", int64_t{0})},
                     {"samples_in_epoch", scalars.value("samples_in_epoch", int64_t{0})},
                     {"counters", scalars.value("counters", json::object())},
                     {"metadata", scalars.value("metadata", json::object())}};
  std::set<std::string> listed;
  for (const auto& key : scalars.value("state_dict_keys", json::array())) {
    const std::string name = key.get<std::string>();
    for (const char* kind : {"model/param/", "model/buffer/"}) {
      auto found = file.tensors.find(kind + name);
      if (found != file.tensors.end()) content.model.emplace_back(name, found->second);
    }
    listed.insert(name);
  }
  for (const char* kind : {"model/param/", "model/buffer/"}) {  // files before state_dict_keys
    const std::string prefix = kind;
    for (auto it = file.tensors.lower_bound(prefix);
         it != file.tensors.end() && it->first.rfind(prefix, 0) == 0; ++it) {
      const std::string name = it->first.substr(prefix.size());
      if (!listed.count(name)) content.model.emplace_back(name, it->second);
    }
  }
  if (scalars.contains("optimizer")) {
    content.optimizer = scalars.at("optimizer");
    for (auto it = file.tensors.lower_bound("optim/");
         it != file.tensors.end() && it->first.rfind("optim/", 0) == 0; ++it) {
      content.optimizer_tensors.insert(*it);
    }
  }
  for (auto it = file.tensors.lower_bound("extra/");
       it != file.tensors.end() && it->first.rfind("extra/", 0) == 0; ++it) {
    content.extra.emplace_back(it->first.substr(6), it->second);
  }
  write_export(content, path, format);
}

}  // namespace ddp::snapshot

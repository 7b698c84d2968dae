// Importing what PyTorch saved into a LibTorch model and optimizer (Note
// [What a PyTorch checkpoint may hold] in ddp/snapshot/pytorch_checkpoint.hpp).

#include <ATen/ATen.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>
#include <nlohmann/json.hpp>

#include <charconv>
#include <iostream>
#include <map>
#include <optional>
#include <set>

#include "base/str.hpp"
#include "ddp/formats/file_format.hpp"
#include "ddp/formats/py_value.hpp"
#include "ddp/formats/safetensors_file.hpp"
#include "ddp/formats/torch_file.hpp"
#include "ddp/snapshot/pytorch_checkpoint.hpp"
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

// Where a checkpoint dict keeps what import_checkpoint() reads (Note [What a
// PyTorch checkpoint may hold]); any other entry is skipped with a warning.
const std::vector<const char*> kModelKeys = {"model", "MODEL_STATE", "model_state_dict",
                                             "state_dict", "model_state"};
const std::vector<const char*> kOptimizerKeys = {"optimizer", "OPTIMIZER_STATE",
                                                 "optimizer_state_dict", "optim"};
const std::vector<const char*> kPositionKeys = {
    "epoch", "EPOCHS_RUN", "step_in_epoch", "samples_in_epoch", "counters", "metadata", "extra"};

// The dict entry of `root` under the first of `keys` it has.
std::pair<std::string, PyRef> find_entry(const PyValue& root,
                                         const std::vector<const char*>& keys) {
  for (const char* key : keys) {
    if (PyRef found = root.get(key)) return {key, found};
  }
  return {"", nullptr};
}

bool all_tensors(const PyValue& dict) {
  for (const auto& [key, value] : dict.entries) {
    if (key->kind != Kind::kString || value->kind != Kind::kTensor) return false;
  }
  return !dict.entries.empty();
}

std::string top_level_keys(const PyValue& root) {
  std::string keys;
  for (const auto& [key, value] : root.entries) {
    keys += (keys.empty() ? "" : ", ") +
            (key->kind == Kind::kString ? "'" + key->text + "'" : key->type_name());
  }
  return keys;
}

// "a, b, c and 4 more": at most ten names of a list, for messages.
std::string some_of(const std::vector<std::string>& names) {
  std::string text;
  for (size_t i = 0; i < names.size() && i < 10; ++i) text += (i ? ", " : "") + names[i];
  if (names.size() > 10) text += base::detail::str(" and ", names.size() - 10, " more");
  return text;
}

// A safetensors metadata value that must be an integer (its epoch, ...).
int64_t metadata_int(const std::string& path, const std::string& key, const std::string& text) {
  int64_t value = 0;
  const char* end = text.data() + text.size();
  const auto [stop, error] = std::from_chars(text.data(), end, value);
  if (text.empty() || error != std::errc() || stop != end) {
    throw SnapshotError("cannot import " + path + ": its safetensors metadata '" + key + "' is '" +
                        text + "', not an integer in 64 bits");
  }
  return value;
}

// The file as a value tree: a torch.save file's root, or a safetensors
// file's tensors as a dict with its metadata's epoch. The format is told
// from the content (Note [A format told from the whole header]).
PyRef read_checkpoint_tree(const std::string& path) {
  const formats::FileFormat format = formats::identify_file(path);
  if (format == formats::FileFormat::kTorchZip) {
    return detail::as_snapshot_error([&] { return formats::read_torch_file(path); });
  }
  if (format != formats::FileFormat::kSafetensors) {
    throw SnapshotError("cannot read the checkpoint " + path + ": " +
                        formats::describe(format, path));
  }
  std::map<std::string, std::string> metadata;
  auto tensors = PyValue::dict();
  for (auto& [name, tensor] :
       detail::as_snapshot_error([&] { return formats::read_safetensors(path, &metadata); })) {
    tensors->set(name, PyValue::of(tensor));
  }
  if (!metadata.count("epoch")) return tensors;
  auto root = PyValue::dict();
  root->set("model", tensors);
  for (const char* key : {"epoch", "step_in_epoch", "samples_in_epoch"}) {
    if (metadata.count(key)) root->set(key, PyValue::of(metadata_int(path, key, metadata.at(key))));
  }
  return root;
}

// An int-valued entry of the file (epoch, ...), checked before anything
// changes: an int, or a tensor of one integral value (torch.tensor(3)).
std::optional<int64_t> int_entry(const std::string& path, const PyValue& root,
                                 const std::vector<const char*>& keys) {
  auto [key, value] = find_entry(root, keys);
  if (!value) return std::nullopt;
  if (value->kind == Kind::kTensor && value->tensor.numel() == 1 &&
      at::isIntegralType(value->tensor.scalar_type(), /*includeBool=*/false)) {
    return value->tensor.item<int64_t>();
  }
  if (value->kind != Kind::kInt) {
    throw SnapshotError("cannot import " + path + ": its '" + key + "' is a " + value->type_name() +
                        ", not an int (or a tensor of one integer)");
  }
  return value->integer;
}

// The model's entries of the file: where they are, and the tensors.
std::pair<std::string, const PyValue*> locate_model(const std::string& path, const PyValue& root) {
  if (root.kind == Kind::kObject || root.kind == Kind::kGlobal) {
    throw SnapshotError("cannot import " + path + ": it refers to the Python global " + root.text +
                        " (it holds a " + root.type_name() +
                        "), which ddp does not call; a whole pickled model cannot be read "
                        "without Python: save model.state_dict() instead");
  }
  if (root.kind != Kind::kDict) {
    throw SnapshotError("cannot import " + path + ": it holds a " + root.type_name() +
                        ", not a dict (a state_dict or a checkpoint dict)");
  }
  if (all_tensors(root)) return {"file", &root};
  auto [key, model] = find_entry(root, kModelKeys);
  if (!model) {
    throw SnapshotError("cannot import " + path +
                        ": it has no model state_dict; it is neither one (all values tensors) "
                        "nor a dict with one under 'model', 'MODEL_STATE', "
                        "'model_state_dict', 'state_dict' or 'model_state' (its keys: " +
                        top_level_keys(root) + ")");
  }
  if (model->kind != Kind::kDict) {
    throw SnapshotError("cannot import " + path + ": its '" + key + "' is a " + model->type_name() +
                        ", not a state_dict");
  }
  for (const auto& [name, value] : model->entries) {
    if (name->kind != Kind::kString || value->kind != Kind::kTensor) {
      throw SnapshotError(
          "cannot import " + path + ": entry " +
          (name->kind == Kind::kString ? "'" + name->text + "'" : name->type_name()) + " of its '" +
          key + "' is a " + value->type_name() + ", not a tensor (extra state is not supported)");
    }
  }
  return {key, model.get()};
}

// The file's model tensors matched to the model's by name, with
// DistributedDataParallel's "module." prefix dropped; the names missing on
// either side are in `report`.
struct ModelMatch {
  NamedTensors live;
  std::map<std::string, at::Tensor> saved;
};

// Check: the file's state_dict against the model. Throws
// StateDictMismatchError when a shape differs, or a name is missing or
// unexpected under ImportOptions::strict.
ModelMatch match_model(const std::string& path, const std::string& model_key, const PyValue& model,
                       const torch::nn::Module& module, const ImportOptions& options,
                       ImportReport& report) {
  ModelMatch match;
  match.live = state_dict(module);
  std::map<std::string, at::Tensor> live_by_name(match.live.begin(), match.live.end());
  bool has_module_child = false;
  for (const auto& child : module.named_children()) has_module_child |= child.key() == "module";
  bool prefixed = !has_module_child;
  for (const auto& entry : model.entries) prefixed &= entry.first->text.rfind("module.", 0) == 0;
  report.dropped_module_prefix = prefixed;
  for (const auto& [name, value] : model.entries) {
    match.saved[prefixed ? name->text.substr(7) : name->text] = value->tensor;
  }
  std::vector<std::string> shape_differs;
  for (const auto& [name, tensor] : match.live) {
    auto found = match.saved.find(name);
    if (found == match.saved.end()) {
      report.missing.push_back(name);
    } else if (!found->second.sizes().equals(tensor.sizes())) {
      shape_differs.push_back(name + " (" + detail::describe_tensor(found->second) +
                              " in the file, " + detail::describe_tensor(tensor) +
                              " in the model)");
    }
  }
  for (const auto& [name, tensor] : match.saved) {
    if (!live_by_name.count(name)) report.unexpected.push_back(name);
  }
  if (shape_differs.empty() &&
      (!options.strict() || (report.missing.empty() && report.unexpected.empty()))) {
    return match;
  }
  std::string message = "cannot load the state_dict of " + path + " (" + model_key + ")" +
                        (prefixed ? " without its 'module.' prefix" : "") + " into the model:";
  if (!report.missing.empty()) {
    message +=
        base::detail::str(" ", report.missing.size(), " missing (", some_of(report.missing), ");");
  }
  if (!report.unexpected.empty()) {
    message += base::detail::str(" ", report.unexpected.size(), " unexpected (",
                                 some_of(report.unexpected), ");");
  }
  if (!shape_differs.empty()) {
    message += base::detail::str(" ", shape_differs.size(), " with another shape (",
                                 some_of(shape_differs), ");");
  }
  message += " load it into the model it was saved from";
  if (shape_differs.empty()) message += ", or pass ImportOptions().strict(false)";
  throw StateDictMismatchError(message, report.missing, report.unexpected, shape_differs);
}

// The training position and the user's state of a checkpoint dict, checked.
struct ImportedScalars {
  std::optional<int64_t> epoch, step_in_epoch, samples_in_epoch;
  std::optional<std::map<std::string, int64_t>> counters;
  std::optional<std::map<std::string, std::string>> metadata;
  std::optional<std::map<std::string, at::Tensor>> extra;
};

// Check: the entries beside the model (none in a bare state_dict).
ImportedScalars read_scalars(const std::string& path, const PyValue& root, bool bare) {
  ImportedScalars scalars;
  scalars.epoch = int_entry(path, root, {"epoch", "EPOCHS_RUN"});
  scalars.step_in_epoch = int_entry(path, root, {"step_in_epoch"});
  scalars.samples_in_epoch = int_entry(path, root, {"samples_in_epoch"});
  if (bare) return scalars;
  auto must_map_str_to = [&](const PyValue& entry, Kind kind, const char* what) {
    for (const auto& [key, value] : entry.entries) {
      if (entry.kind != Kind::kDict || key->kind != Kind::kString || value->kind != kind) {
        throw SnapshotError("cannot import " + path +
                            ": its counters, metadata and extra must map str to " + what +
                            ", found a " + value->type_name());
      }
    }
  };
  if (const PyRef entry = root.get("counters")) {
    must_map_str_to(*entry, Kind::kInt, "int");
    auto& counters = scalars.counters.emplace();
    for (const auto& [key, value] : entry->entries) counters[key->text] = value->integer;
  }
  if (const PyRef entry = root.get("metadata")) {
    must_map_str_to(*entry, Kind::kString, "str");
    auto& metadata = scalars.metadata.emplace();
    for (const auto& [key, value] : entry->entries) metadata[key->text] = value->text;
  }
  if (const PyRef entry = root.get("extra")) {
    must_map_str_to(*entry, Kind::kTensor, "Tensor");
    auto& extra = scalars.extra.emplace();
    for (const auto& [key, value] : entry->entries) extra[key->text] = value->tensor;
  }
  return scalars;
}

}  // namespace

// Note [Importing in three steps]
// As restore_training_state() does (Note [Restoring in three steps]): locate
// the model's entries in the file, check the model, the optimizer and the
// scalars against the live objects, and only then apply all of it, so that a
// checkpoint that does not fit changes nothing.
ImportReport import_checkpoint(const std::string& path, TrainingState& state,
                               const ImportOptions& options) {
  if (state.model == nullptr) {
    throw SnapshotError("import_checkpoint: state.model is null; point it at the model to load " +
                        path + " into");
  }
  if (detail::sharded_part(state) != nullptr) {
    throw SnapshotError(
        "import_checkpoint: the state is sharded (zero_optimizer or fully_sharded); import into "
        "the plain model and optimizer first, then wrap them");
  }
  // Locate.
  const PyRef root = read_checkpoint_tree(path);
  ImportReport report;
  const auto [model_key, model] = locate_model(path, *root);
  report.model_key = model_key;
  const bool bare = model_key == "file";

  // Check.
  const ModelMatch match = match_model(path, model_key, *model, *state.model, options, report);
  json optimizer_description;
  TensorMap optimizer_tensors;
  auto [optimizer_key, optimizer] = find_entry(*root, kOptimizerKeys);
  if (!bare && optimizer && state.optimizer) {
    const std::string where =
        "cannot import the optimizer state of " + path + " ('" + optimizer_key + "')";
    optimizer_description =
        detail::optimizer_from_pytorch(where, *optimizer, *state.optimizer, optimizer_tensors);
    detail::check_optimizer(where, optimizer_description, optimizer_tensors, *state.optimizer);
    report.optimizer_key = optimizer_key;
  }
  ImportedScalars scalars = read_scalars(path, *root, bare);
  if (!bare) {
    std::set<std::string> used(kPositionKeys.begin(), kPositionKeys.end());
    used.insert(model_key);
    if (optimizer) used.insert(optimizer_key);
    for (const auto& [key, value] : root->entries) {
      if (key->kind != Kind::kString || !used.count(key->text)) {
        report.skipped.push_back(key->kind == Kind::kString ? key->text : key->type_name());
      }
    }
    if (!report.skipped.empty()) {
      std::cerr << "ddp: warning: import_checkpoint(" << path << "): skipped the entries "
                << some_of(report.skipped)
                << ", which are neither the model, the optimizer nor the training position"
                << std::endl;
    }
  }

  // Apply: all of it fits.
  {
    at::NoGradGuard no_grad;
    for (const auto& [name, tensor] : match.live) {
      auto found = match.saved.find(name);
      if (found == match.saved.end()) continue;
      at::Tensor target = tensor;
      target.copy_(found->second);
      ++report.tensors_loaded;
    }
  }
  if (!report.optimizer_key.empty()) {
    detail::import_optimizer(optimizer_description, optimizer_tensors, *state.optimizer);
  }
  if (scalars.epoch) state.epoch = *scalars.epoch;
  if (scalars.step_in_epoch) state.step_in_epoch = *scalars.step_in_epoch;
  if (scalars.samples_in_epoch) state.samples_in_epoch = *scalars.samples_in_epoch;
  if (scalars.counters) state.counters = std::move(*scalars.counters);
  if (scalars.metadata) state.metadata = std::move(*scalars.metadata);
  if (scalars.extra) detail::adopt_extra_tensors(*scalars.extra, state);
  return report;
}

}  // namespace ddp::snapshot

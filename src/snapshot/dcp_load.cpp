// load_distributed_checkpoint (ddp/snapshot/distributed_checkpoint.hpp):
// each rank reads the boxes of its pieces (Note [A training state in DCP]
// in src/snapshot/dcp_layout.hpp) and hands them to the sharded state as a
// snapshot's shards are handed (src/snapshot/sharded_state.hpp).

#include <ATen/ATen.h>
#include <torch/torch.h>

#include <exception>
#include <map>

#include "base/str.hpp"
#include "comm/byte_exchange.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/formats/dcp.hpp"
#include "ddp/formats/errors.hpp"
#include "ddp/snapshot/distributed_checkpoint.hpp"
#include "ddp/snapshot/errors.hpp"
#include "snapshot/dcp_layout.hpp"
#include "snapshot/optimizer_state.hpp"
#include "snapshot/pytorch_optimizer.hpp"
#include "snapshot/sharded_state.hpp"

namespace ddp::snapshot {

namespace {

using formats::DcpReader;
using formats::PyRef;
using formats::PyValue;
using Kind = PyValue::Kind;

// Elements [begin, begin + length) of tensor `key` of `shape`, flattened,
// as `like`'s dtype, in a tensor of `like`'s size (zeros past the run: a
// shard's padding).
at::Tensor read_run(DcpReader& reader, const std::string& key, const std::vector<int64_t>& shape,
                    int64_t begin, int64_t length, const at::Tensor& like) {
  const auto found = reader.metadata().tensors.find(key);
  if (found == reader.metadata().tensors.end()) {
    throw SnapshotError("the checkpoint has no tensor " + key);
  }
  if (found->second.size != shape) {
    throw SnapshotError(
        base::detail::str(key, " has the shape ", c10::IntArrayRef(found->second.size),
                          " in the checkpoint, ", c10::IntArrayRef(shape), " here"));
  }
  at::Tensor result = at::zeros({like.numel()}, like.options().device(at::kCPU));
  int64_t at_element = 0;
  for (const auto& box : detail::flat_range_boxes(shape, begin, length)) {
    const at::Tensor part = reader.read(key, box).reshape(-1);
    result.narrow(0, at_element, part.numel()).copy_(part);
    at_element += part.numel();
  }
  return result.view(like.sizes());
}

// The model's buffer or parameter `name`.
at::Tensor model_tensor(const torch::nn::Module& model, const std::string& name) {
  const auto buffers = model.named_buffers(/*recurse=*/true);
  if (const at::Tensor* found = buffers.find(name)) return *found;
  const auto parameters = model.named_parameters(/*recurse=*/true);
  return *parameters.find(name);
}

// The checkpoint's param groups: each parameter name's group.
std::map<std::string, size_t> groups_of(DcpReader& reader, const std::string& optim) {
  std::map<std::string, size_t> group_of;
  for (size_t g = 0;; ++g) {
    const std::string key = base::detail::str(optim, ".param_groups.", g, ".params");
    if (!reader.has_object(key)) break;
    const PyRef params = reader.read_object(key);
    if (params->kind != Kind::kList) throw SnapshotError(key + " is not a list of names");
    for (const auto& name : params->items) {
      if (name->kind != Kind::kString) {
        throw SnapshotError(key + " lists a " + name->type_name() +
                            ", not a parameter's name: the optimizer was saved keyed by index; "
                            "save it with torch.distributed.checkpoint.state_dict.get_state_dict");
      }
      group_of[name->text] = g;
    }
  }
  if (group_of.empty()) {
    throw SnapshotError("the checkpoint holds no optimizer under '" + optim + "' (no " + optim +
                        ".param_groups.0.params); give its key as optimizer_key, or an empty "
                        "optimizer_key to load the model alone");
  }
  return group_of;
}

// This rank's optimizer state as PyTorch's state_dict of the local
// optimizer (state by local index, the pieces' elements in local-shaped
// tensors), for optimizer_from_pytorch().
PyRef local_optimizer_state(DcpReader& reader, const detail::ShardedLayout& layout,
                            const std::string& optim) {
  const std::map<std::string, size_t> group_of = groups_of(reader, optim);
  auto state = PyValue::dict();
  // Each local group takes the options of the checkpoint's group its
  // parameters are in; a local group must not mix the checkpoint's groups.
  const size_t local_groups = layout.sharded->local_optimizer().param_groups().size();
  std::vector<int64_t> saved_group(local_groups, -1);
  auto groups = PyValue::list();
  for (size_t g = 0; g < local_groups; ++g) {
    auto options = PyValue::dict();
    options->set("params", PyValue::list());
    groups->items.push_back(options);
  }
  int64_t index = 0;
  for (const detail::LocalPiece& piece : layout.pieces) {
    if (!piece.stepped) continue;  // Note [Pieces outside the optimizer]: its values alone
    const std::string& name = layout.names[piece.parameter];
    const auto found = group_of.find(name);
    if (found == group_of.end()) {
      throw SnapshotError(
          "parameter " + name +
          " is in none of the checkpoint's param groups: the job that saved it left it out of "
          "its optimizer (frozen?); leave it out of this one too (an optimizer over the "
          "trainable parameters only), or load the model alone with an empty optimizer_key");
    }
    int64_t& saved = saved_group[piece.group];
    if (saved >= 0 && saved != static_cast<int64_t>(found->second)) {
      throw SnapshotError(base::detail::str(
          "parameter ", name, " is in the checkpoint's param group ", found->second,
          ", but this optimizer's group ", piece.group, " also holds parameters of its group ",
          saved, "; make the optimizer's param groups as the checkpoint's"));
    }
    saved = static_cast<int64_t>(found->second);
    groups->items[piece.group]->get("params")->items.push_back(PyValue::of(index));
    auto entry = PyValue::dict();
    const std::string state_prefix = optim + ".state." + name + ".";
    // The parameter's fields only: the keys sort together.
    const auto& tensors = reader.metadata().tensors;
    for (auto it = tensors.lower_bound(state_prefix);
         it != tensors.end() && it->first.rfind(state_prefix, 0) == 0; ++it) {
      const std::string& key = it->first;
      const std::string field = key.substr(state_prefix.size());
      if (field == "step") {
        entry->set(field, PyValue::of(reader.read(key)));
      } else {
        entry->set(field, PyValue::of(read_run(reader, key, layout.shapes[piece.parameter],
                                               piece.begin, piece.length, piece.local)));
      }
    }
    if (!entry->entries.empty()) state->set(PyValue::of(index), entry);
    ++index;
  }
  for (size_t g = 0; g < local_groups; ++g) {  // an empty group: the same-numbered one
    const int64_t saved = saved_group[g] >= 0 ? saved_group[g] : static_cast<int64_t>(g);
    const std::string prefix = base::detail::str(optim, ".param_groups.", saved, ".");
    for (const auto& [key, location] : reader.metadata().objects) {
      if (key.rfind(prefix, 0) == 0 && key != prefix + "params") {
        groups->items[g]->set(key.substr(prefix.size()), reader.read_object(key));
      }
    }
  }
  auto result = PyValue::dict();
  result->set("state", state);
  result->set("param_groups", groups);
  return result;
}

}  // namespace

void load_distributed_checkpoint(const std::string& directory, TrainingState& state,
                                 const DistributedCheckpointOptions& options) {
  const detail::ShardedLayout layout = detail::sharded_layout(state, "load_distributed_checkpoint");
  ProcessGroup& group = layout.sharded->group();
  const std::string where = "load_distributed_checkpoint: " + directory;
  detail::ShardImport import;
  std::map<std::string, at::Tensor> full;  // buffers, and ZeRO's parameters
  std::string failure;
  try {
    DcpReader reader(directory);
    for (const detail::LocalPiece& piece : layout.pieces) {
      import.values.push_back(
          read_run(reader, options.model_key() + "." + layout.names[piece.parameter],
                   layout.shapes[piece.parameter], piece.begin, piece.length, piece.local));
    }
    torch::optim::Optimizer& optimizer = layout.sharded->local_optimizer();
    if (options.optimizer_key().empty()) {
      import.description = detail::export_optimizer(optimizer, import.tensors);
    } else {
      const PyRef pytorch = local_optimizer_state(reader, layout, options.optimizer_key());
      import.description =
          detail::optimizer_from_pytorch(where, *pytorch, optimizer, import.tensors);
      detail::check_optimizer(where, import.description, import.tensors, optimizer);
    }
    if (state.model != nullptr) {
      for (const auto& item : state.model->named_buffers(/*recurse=*/true)) {
        if (!item.value().defined()) continue;
        full[item.key()] = reader.read(options.model_key() + "." + item.key());
      }
      if (!layout.sharded->holds_values()) {  // ZeRO: its parameters and the frozen ones, whole
        for (const auto* names : {&layout.names, &layout.whole}) {
          for (const std::string& name : *names) {
            full[name] = reader.read(options.model_key() + "." + name);
          }
        }
      }
      for (auto& [name, tensor] : full) {
        const at::Tensor target = model_tensor(*state.model, name);
        if (target.sizes() != tensor.sizes()) {
          throw SnapshotError(base::detail::str(options.model_key(), ".", name, " has the shape ",
                                                tensor.sizes(), " in the checkpoint, ",
                                                target.sizes(), " here"));
        }
      }
    }
    if (reader.has_object("epoch")) {
      const PyRef epoch = reader.read_object("epoch");
      const PyRef step = reader.has_object("step_in_epoch") ? reader.read_object("step_in_epoch")
                                                            : PyValue::of(int64_t{0});
      if (epoch->kind == Kind::kInt) state.epoch = epoch->integer;
      if (step->kind == Kind::kInt) state.step_in_epoch = step->integer;
    }
  } catch (const std::exception& e) {  // FormatError, SnapshotError, or LibTorch's own
    failure = e.what();
  }
  // Every rank learns whether all could read their part, before any
  // changes its state.
  const std::vector<std::string> failures = comm::detail::all_gather_bytes(group, failure);
  for (size_t r = 0; r < failures.size(); ++r) {
    if (!failures[r].empty()) {
      const std::string& message = failures[r];
      throw SnapshotError(message.rfind(where, 0) == 0
                              ? base::detail::str(message, " (rank ", r, ")")
                              : base::detail::str(where, ": ", message, " (rank ", r, ")"));
    }
  }
  detail::apply_shard_import(import, *layout.sharded);
  torch::NoGradGuard no_grad;
  for (const auto& [name, tensor] : full) model_tensor(*state.model, name).copy_(tensor);
}

}  // namespace ddp::snapshot

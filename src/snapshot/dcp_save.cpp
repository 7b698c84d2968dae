// save_distributed_checkpoint (ddp/snapshot/distributed_checkpoint.hpp):
// each rank writes its pieces as boxes (Note [A training state in DCP] in
// src/snapshot/dcp_layout.hpp), rank 0 the metadata of all.

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <exception>
#include <filesystem>
#include <map>
#include <set>

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

namespace ddp::snapshot {

namespace {

using formats::DcpBox;
using formats::DcpItem;
using formats::PyRef;
using formats::PyValue;
using json = nlohmann::json;
namespace fs = std::filesystem;

json item_to_json(const DcpItem& item) {
  return {{"key", item.key},
          {"tensor", item.is_tensor},
          {"dtype", static_cast<int>(item.dtype)},
          {"size", item.size},
          {"offsets", item.box.offsets},
          {"sizes", item.box.sizes},
          {"file", item.location.file},
          {"offset", item.location.offset},
          {"length", item.location.length}};
}

DcpItem item_from_json(const json& j) {
  DcpItem item;
  item.key = j.at("key").get<std::string>();
  item.is_tensor = j.at("tensor").get<bool>();
  item.dtype = static_cast<at::ScalarType>(j.at("dtype").get<int>());
  item.size = j.at("size").get<std::vector<int64_t>>();
  item.box.offsets = j.at("offsets").get<std::vector<int64_t>>();
  item.box.sizes = j.at("sizes").get<std::vector<int64_t>>();
  item.location = {j.at("file").get<std::string>(), j.at("offset").get<uint64_t>(),
                   j.at("length").get<uint64_t>()};
  return item;
}

// Writes the run [begin, begin + flat.numel()) of tensor `key` of `shape`
// as the boxes that tile it.
void write_run(formats::DcpFileWriter& writer, const std::string& key,
               const std::vector<int64_t>& shape, int64_t begin, const at::Tensor& flat) {
  int64_t at_element = 0;
  for (const DcpBox& box : detail::flat_range_boxes(shape, begin, flat.numel())) {
    const int64_t n = box.numel();
    writer.add_tensor(key, shape, box, flat.narrow(0, at_element, n).reshape(box.sizes));
    at_element += n;
  }
}

// One rank's part of the save: its file, and the parameters of each of its
// param groups (by index into the layout's names).
json write_rank_file(const std::string& directory, const detail::ShardedLayout& layout,
                     const TrainingState& state, const DistributedCheckpointOptions& options,
                     int rank) {
  formats::DcpFileWriter writer(directory, rank);
  detail::TensorMap tensors;
  const json description = detail::export_optimizer(layout.sharded->local_optimizer(), tensors);
  json groups = json::array();
  for (const detail::LocalPiece& piece : layout.pieces) {
    if (piece.stepped) {
      while (groups.size() <= piece.group) groups.push_back(json::array());
      groups[piece.group].push_back(piece.parameter);
    }
    if (piece.length == 0 || !layout.writes_pieces) continue;
    const std::string& name = layout.names[piece.parameter];
    const auto& shape = layout.shapes[piece.parameter];
    const at::Tensor values = piece.local.detach().reshape(-1).narrow(0, 0, piece.length);
    write_run(writer, options.model_key() + "." + name, shape, piece.begin, values.cpu());
    if (options.optimizer_key().empty() || !piece.stepped) continue;
    const std::string state_key = options.optimizer_key() + ".state." + name + ".";
    for (const auto& [field, tensor] :
         detail::optimizer_state_fields(tensors, piece.group, piece.index)) {
      write_run(writer, state_key + field, shape, piece.begin,
                tensor.detach().reshape(-1).narrow(0, 0, piece.length).cpu());
    }
    const json& saved = description.at("groups").at(piece.group).at("state").at(piece.index);
    if (piece.begin == 0 && saved.is_object() && saved.contains("step")) {
      // PyTorch keeps `step` as a 0-d float32 tensor; the first piece's
      // owner saves it.
      writer.add_tensor(state_key + "step", {}, DcpBox{},
                        at::scalar_tensor(saved.at("step").get<double>(), at::kFloat));
    }
  }
  if (rank == 0 && state.model != nullptr) {
    auto add_whole = [&](const std::string& name, const at::Tensor& tensor) {
      const at::Tensor value = tensor.detach().cpu();
      DcpBox whole{std::vector<int64_t>(value.dim(), 0), value.sizes().vec()};
      writer.add_tensor(options.model_key() + "." + name, value.sizes().vec(), whole, value);
    };
    for (const auto& item : state.model->named_buffers(/*recurse=*/true)) {
      if (item.value().defined()) add_whole(item.key(), item.value());
    }
    const auto parameters = state.model->named_parameters(/*recurse=*/true);
    for (const std::string& name : layout.whole) add_whole(name, *parameters.find(name));
    writer.add_object("epoch", *PyValue::of(state.epoch));
    writer.add_object("step_in_epoch", *PyValue::of(state.step_in_epoch));
  }
  json items = json::array();
  for (const DcpItem& item : writer.finish()) items.push_back(item_to_json(item));
  return {{"items", items}, {"groups", groups}, {"description", description}};
}

// Rank 0, once every rank wrote its file: the param groups (options from
// rank 0's optimizer, parameters from every rank's pieces) in a file of
// their own, then the metadata of everything.
void write_groups_and_metadata(const std::string& directory, const detail::ShardedLayout& layout,
                               const std::vector<json>& reports,
                               const DistributedCheckpointOptions& options) {
  std::vector<DcpItem> items;
  for (const json& report : reports) {
    for (const json& item : report.at("items")) items.push_back(item_from_json(item));
  }
  std::map<std::string, std::vector<PyRef>> paths;
  auto path_of_tensor_key = [&](const DcpItem& item) {
    const std::string& model = options.model_key();
    if (item.key.rfind(model + ".", 0) == 0) {
      paths[item.key] = detail::dcp_path(model, {PyValue::of(item.key.substr(model.size() + 1))});
      return;
    }
    // <optim>.state.<name>.<field>
    const std::string rest = item.key.substr(options.optimizer_key().size() + 7);
    const size_t dot = rest.rfind('.');
    paths[item.key] = detail::dcp_path(options.optimizer_key(),
                                       {PyValue::of("state"), PyValue::of(rest.substr(0, dot)),
                                        PyValue::of(rest.substr(dot + 1))});
  };
  for (const DcpItem& item : items) {
    if (item.is_tensor) path_of_tensor_key(item);
    if (!item.is_tensor) paths[item.key] = {PyValue::of(item.key)};
  }
  if (!options.optimizer_key().empty()) {
    formats::DcpFileWriter writer(directory, 0, 1);
    const PyRef pytorch = detail::optimizer_to_pytorch(reports[0].at("description"), {});
    const PyRef groups = pytorch->get("param_groups");
    for (size_t g = 0; g < groups->items.size(); ++g) {
      const std::string key = base::detail::str(options.optimizer_key(), ".param_groups.", g, ".");
      auto add = [&](const std::string& option, const PyValue& value) {
        writer.add_object(key + option, value);
        paths[key + option] = detail::dcp_path(
            options.optimizer_key(), {PyValue::of("param_groups"),
                                      PyValue::of(static_cast<int64_t>(g)), PyValue::of(option)});
      };
      for (const auto& [option, value] : groups->items[g]->entries) {
        if (option->text != "params") add(option->text, *value);
      }
      for (const auto& [option, value] : detail::pytorch_only_options()) {
        if (!groups->items[g]->get(option)) add(option, *value);
      }
      std::set<size_t> members;
      for (const json& report : reports) {
        if (g < report.at("groups").size()) {
          for (const json& p : report.at("groups").at(g)) members.insert(p.get<size_t>());
        }
      }
      auto names = PyValue::list();
      for (size_t p : members) names->items.push_back(PyValue::of(layout.names.at(p)));
      add("params", *names);
    }
    for (const DcpItem& item : writer.finish()) items.push_back(item);
  }
  formats::write_dcp_metadata(directory, items, paths);
}

}  // namespace

void save_distributed_checkpoint(const std::string& directory, const TrainingState& state,
                                 const DistributedCheckpointOptions& options) {
  const detail::ShardedLayout layout = detail::sharded_layout(state, "save_distributed_checkpoint");
  ProcessGroup& group = layout.sharded->group();
  const int rank = group.rank();
  auto attempt = [&](const auto& action) -> std::string {
    try {
      action();
      return "";
    } catch (const std::exception& e) {
      return e.what();
    }
  };
  // Note [A checkpoint is its metadata]: rank 0 removes the old .metadata
  // before any rank writes, so that a save that fails halfway leaves no
  // checkpoint pointing into half-written files; it writes the new one last.
  std::string failure;
  if (rank == 0) {
    failure = attempt([&] {
      fs::create_directories(directory);
      fs::remove(fs::path(directory) / formats::kDcpMetadataFile);
    });
  }
  group.barrier();
  json report;
  if (failure.empty()) {
    failure = attempt([&] { report = write_rank_file(directory, layout, state, options, rank); });
  }
  const auto [failed, cause] = comm::detail::first_failure(group, failure);
  std::string outcome = failed < 0 ? "" : base::detail::str("rank ", failed, ": ", cause);
  std::vector<json> reports;
  if (failed < 0) {
    for (const std::string& each : comm::detail::all_gather_bytes(group, report.dump())) {
      reports.push_back(json::parse(each));
    }
  }
  if (rank == 0 && outcome.empty()) {
    outcome = attempt([&] { write_groups_and_metadata(directory, layout, reports, options); });
    if (!outcome.empty()) outcome = "rank 0: " + outcome;
  }
  outcome = comm::detail::broadcast_bytes(group, outcome, 0);
  if (!outcome.empty()) {
    // The files of a save that failed are not a checkpoint (it has no
    // .metadata): each rank gives back the space of its own.
    std::error_code ignored;
    fs::remove(fs::path(directory) / formats::dcp_file_name(rank), ignored);
    if (rank == 0) fs::remove(fs::path(directory) / formats::dcp_file_name(0, 1), ignored);
    throw SnapshotError("save_distributed_checkpoint: cannot save " + directory + " (" + outcome +
                        ")");
  }
}

}  // namespace ddp::snapshot

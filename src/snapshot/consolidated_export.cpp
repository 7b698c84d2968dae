#include "ddp/snapshot/consolidated_export.hpp"

#include <ATen/ATen.h>

#include <exception>
#include <filesystem>
#include <memory>

#include "base/str.hpp"
#include "comm/byte_exchange.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/parallel/fully_sharded_state.hpp"
#include "ddp/snapshot/errors.hpp"
#include "snapshot/consolidated_optimizer.hpp"
#include "snapshot/failure_message.hpp"
#include "snapshot/snapshot_format.hpp"
#include "snapshot/state_records.hpp"

namespace ddp::snapshot {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::string save_consolidated(FullyShardedDataParallel& model, const std::string& path,
                              const TrainingState& state) {
  if (state.model || state.optimizer || state.zero_optimizer) {
    throw SnapshotError(
        "save_consolidated: the training state has a model, optimizer or ZeRO optimizer; give "
        "it only the epoch, counters, metadata, extra tensors and, for the optimizer's state, "
        "fully_sharded (the model is the FSDP model's)");
  }
  if (state.fully_sharded != nullptr) {
    std::vector<std::string> names;
    for (const auto& piece : model->pieces_of()) names.push_back(piece.name);
    if (state.fully_sharded->names() != names) {
      throw SnapshotError(
          "save_consolidated: the training state's fully_sharded is another model's (its "
          "parameters have other names); give the FullyShardedState of the model being saved");
    }
  }
  ProcessGroup& group = *model->process_group();
  const bool writer = group.rank() == 0;
  std::exception_ptr failure;
  std::string cause;  // failure's message, for the other ranks
  std::unique_ptr<detail::SnapshotWriter> file;
  auto attempt = [&](const auto& action) {
    if (failure) return;
    try {
      action();
    } catch (...) {
      failure = std::current_exception();
      cause = detail::what_failed(failure);
    }
  };
  // Note [A consolidated export streams]
  if (writer) {
    attempt([&] {
      const fs::path target(path);
      const fs::path directory = target.has_parent_path() ? target.parent_path() : ".";
      file = std::make_unique<detail::SnapshotWriter>(
          (directory / ("." + target.filename().string() + ".tmp")).string());
    });
  }
  model->for_each_full_parameter([&](const std::string& name, const at::Tensor& value) {
    if (writer) attempt([&] { file->add_tensor("model/param/" + name, value); });
  });
  json optimizer;
  if (state.fully_sharded != nullptr) {  // its state in full, a parameter at a time
    optimizer = detail::gather_full_optimizer(
        *state.fully_sharded, [&](const std::string& record, const at::Tensor& value) {
          attempt([&] { file->add_tensor(record, value); });
        });
  }
  if (writer) {
    attempt([&] {
      TrainingState scalars_only = state;
      scalars_only.fully_sharded = nullptr;
      scalars_only.include_rng = false;
      detail::StateRecords records = detail::state_records(scalars_only, {}, nullptr, 1);
      records.scalars["model"] = true;
      if (!optimizer.is_null()) records.scalars["optimizer"] = optimizer;
      records.scalars["metadata"]["consolidated_from"] =
          base::detail::str("FullyShardedDataParallel, ", group.size(), " rank(s)");
      for (const auto& item : model->module()->named_buffers(/*recurse=*/true)) {
        if (item.value().defined()) file->add_tensor("model/buffer/" + item.key(), item.value());
      }
      for (const auto& [name, tensor] : records.tensors) file->add_tensor(name, tensor);
      file->add_json("scalars", detail::scalars_text(records.scalars));
      file->commit(path, /*world_size=*/1, /*sequence=*/1);
    });
  }
  if (group.size() > 1) {  // rank 0's outcome, its cause too; the others wait here
    cause = comm::detail::broadcast_bytes(group, cause, 0);
    if (!writer && !cause.empty()) {
      throw SnapshotError("rank 0 could not write the consolidated model to " + path + ": " +
                          cause);
    }
  }
  if (failure) std::rethrow_exception(failure);
  return path;
}

}  // namespace ddp::snapshot

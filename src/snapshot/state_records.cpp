#include "snapshot/state_records.hpp"

#include <ATen/ATen.h>
#include <c10/util/Type.h>
#include <torch/version.h>

#include <typeinfo>

#include "ddp/snapshot/errors.hpp"
#include "ddp/snapshot/pytorch_checkpoint.hpp"
#include "snapshot/grad_scaler_state.hpp"
#include "snapshot/optimizer_state.hpp"
#include "snapshot/rng_states.hpp"
#include "snapshot/sharded_state.hpp"
#include "snapshot/snapshot_format.hpp"

namespace ddp::snapshot::detail {

using nlohmann::json;

json position_scalars(const TrainingState& state) {
  return {{"epoch", state.epoch},
          {"step_in_epoch", state.step_in_epoch},
          {"samples_in_epoch", state.samples_in_epoch},
          {"counters", state.counters},
          {"metadata", state.metadata}};
}

StateRecords state_records(const snapshot::TrainingState& state,
                           const std::map<std::string, at::Tensor>& rng, const json& sharded_record,
                           int world_size) {
  StateRecords records;
  records.scalars = position_scalars(state);
  json& scalars = records.scalars;
  scalars["model"] = state.model != nullptr;
  scalars["rng"] = !rng.empty();
  scalars["world_size"] = world_size;
  scalars["torch_version"] = TORCH_VERSION;
  auto& tensors = records.tensors;
  if (state.model && state.fully_sharded == nullptr) {
    for (const auto& item : state.model->named_parameters(/*recurse=*/true)) {
      if (item.value().defined()) tensors.emplace_back("model/param/" + item.key(), item.value());
    }
  }
  if (state.model) {
    // The names in PyTorch's state_dict() order, which an export keeps.
    json& keys = scalars["state_dict_keys"] = json::array();
    for (const auto& entry : snapshot::state_dict(*state.model)) keys.push_back(entry.first);
    for (const auto& item : state.model->named_buffers(/*recurse=*/true)) {
      if (item.value().defined()) tensors.emplace_back("model/buffer/" + item.key(), item.value());
    }
  }
  if (state.optimizer) {
    TensorMap optimizer_tensors;
    scalars["optimizer"] = export_optimizer(*state.optimizer, optimizer_tensors);
    for (auto& entry : optimizer_tensors) tensors.emplace_back(entry);
  }
  if (state.scheduler) {
    scalars["scheduler"] = {{"type", c10::demangle(typeid(*state.scheduler).name())},
                            {"step_count", scheduler_step_count(*state.scheduler)}};
  }
  if (state.grad_scaler) scalars["grad_scaler"] = grad_scaler_to_json(*state.grad_scaler);
  if (!sharded_record.is_null()) {
    scalars[sharded_record_key(*sharded_part(state))] = sharded_record;
  }
  for (const auto& [key, tensor] : state.extra_tensors)
    tensors.emplace_back("extra/" + key, tensor);
  for (const auto& entry : rng) tensors.emplace_back(entry);
  return records;
}

std::string scalars_text(const json& scalars) {
  try {
    return scalars.dump(1);
  } catch (const json::exception& e) {
    throw SnapshotError("cannot save the training state: metadata must be valid UTF-8 (" +
                        std::string(e.what()) + ")");
  }
}

}  // namespace ddp::snapshot::detail

namespace ddp::snapshot {

SnapshotFile capture_training_state(const TrainingState& state) {
  if (detail::sharded_part(state) != nullptr) {
    throw SnapshotError(
        "capture_training_state: a ZeroRedundancyOptimizer's or FullyShardedDataParallel's "
        "state is sharded across the ranks, so one process cannot capture it (a lost rank's "
        "shard exists nowhere else); keep it in snapshot files (SnapshotManager) or commit it "
        "with elastic::State instead");
  }
  return detail::capture_unsharded(state);
}

}  // namespace ddp::snapshot

namespace ddp::snapshot::detail {

SnapshotFile capture_unsharded(const TrainingState& state) {
  std::map<std::string, at::Tensor> rng;
  if (state.include_rng) {
    for (auto& [device, generator] : generators()) {
      rng.emplace("rng/rank0/" + device, generator_state(generator));
    }
  }
  StateRecords records = state_records(state, rng, nullptr, /*world_size=*/1);
  SnapshotFile file;
  file.path = "(in memory)";
  file.format_version = kSnapshotFormatVersion;
  file.world_size = 1;
  for (const auto& [name, tensor] : records.tensors) {
    file.tensors.emplace(name, tensor.detach().to(at::kCPU).clone());
  }
  file.scalars_json = scalars_text(records.scalars);
  return file;
}

void adopt_extra_tensors(const std::map<std::string, at::Tensor>& saved, TrainingState& state) {
  std::map<std::string, at::Tensor> adopted;
  for (const auto& [name, tensor] : saved) {
    auto live = state.extra_tensors.find(name);
    if (live != state.extra_tensors.end() && live->second.defined() &&
        live->second.sizes().equals(tensor.sizes()) &&
        live->second.scalar_type() == tensor.scalar_type()) {
      at::NoGradGuard no_grad;
      live->second.copy_(tensor);
      adopted.emplace(name, live->second);
    } else {
      adopted.emplace(name, tensor.clone());
    }
  }
  state.extra_tensors = std::move(adopted);
}

}  // namespace ddp::snapshot::detail

// restore_training_state(): a SnapshotFile's records back into the live
// objects of a TrainingState, checked, planned, then applied.

#include <ATen/ATen.h>
#include <torch/torch.h>
#include <nlohmann/json.hpp>

#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/str.hpp"
#include "ddp/snapshot/errors.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"
#include "snapshot/grad_scaler_state.hpp"
#include "snapshot/optimizer_state.hpp"
#include "snapshot/rng_states.hpp"
#include "snapshot/sharded_state.hpp"
#include "snapshot/snapshot_format.hpp"
#include "snapshot/state_records.hpp"

namespace ddp::snapshot {
namespace {

using detail::generator_state;
using detail::generators;
using nlohmann::json;

// Note [Restoring in three steps]
// restore_training_state() checks, plans, then applies, so that a snapshot
// that does not fit changes nothing live:
//   check: the scalars record holds every piece the TrainingState asks for,
//          in the form it must have (SavedScalars);
//   plan:  every saved tensor is matched to the live one it replaces, by
//          name, shape and dtype, and the optimizer, the shards and the RNG
//          states are checked against theirs (RestorePlan);
//   apply: the copies and assignments of the plan, none of which can fail
//          on a mismatch, since the plan has found none.
// The first two throw a SnapshotError that names the file and the piece.

// What the scalars record holds, checked against what `state` asks for.
struct SavedScalars {
  json record;
  int64_t epoch = 0;
  int64_t step_in_epoch = 0;
  int64_t samples_in_epoch = 0;
  unsigned scheduler_steps = 0;
  std::map<std::string, int64_t> counters;
  std::map<std::string, std::string> metadata;
  amp::GradScalerState scaler;
};

// Everything restore_training_state() will change, matched and checked.
struct RestorePlan {
  SavedScalars scalars;
  parallel::ShardedState* sharded = nullptr;
  const char* sharded_key = "";
  std::vector<std::pair<at::Tensor, const at::Tensor*>> model_copies;  // live <- saved
  std::optional<detail::ShardImport> shards;
  std::vector<std::pair<at::Generator, const at::Tensor*>> rng_states;
  std::optional<uint64_t> rng_seed;  // Note [Resuming at another world size]
};

void warn_no_rng_state(const std::string& what) {
  std::cerr << "ddp: warning: " << what << "; the generators keep their current state" << std::endl;
}

[[noreturn]] void restore_failure(const SnapshotFile& file, const std::string& problem) {
  throw SnapshotError(file.path + ": " + problem);
}

// Check: the scalars record of `file` against `state` (Note [Restoring in
// three steps]).
SavedScalars check_scalars(const SnapshotFile& file, const TrainingState& state,
                           const parallel::ShardedState* sharded, const char* sharded_key) {
  auto fail = [&](const std::string& problem) { restore_failure(file, problem); };
  SavedScalars saved;
  try {
    json& scalars = saved.record;
    scalars = json::parse(file.scalars_json);
    saved.epoch = scalars.at("epoch").get<int64_t>();
    saved.step_in_epoch = scalars.at("step_in_epoch").get<int64_t>();
    saved.samples_in_epoch = scalars.value("samples_in_epoch", int64_t{0});
    saved.counters = scalars.at("counters").get<std::map<std::string, int64_t>>();
    saved.metadata = scalars.at("metadata").get<std::map<std::string, std::string>>();
    if (state.scheduler) {
      if (!scalars.contains("scheduler"))
        fail("the snapshot holds no learning-rate scheduler state");
      saved.scheduler_steps = scalars.at("scheduler").at("step_count").get<unsigned>();
    }
    if (state.optimizer && scalars.contains("zero")) {
      fail(
          "the snapshot holds a ZeroRedundancyOptimizer's sharded state; resume it through "
          "TrainingState::zero_optimizer");
    }
    if (state.optimizer && scalars.contains("fully_sharded")) {
      fail(
          "the snapshot holds a FullyShardedDataParallel's sharded state; resume it through "
          "TrainingState::fully_sharded");
    }
    if (state.optimizer && !scalars.contains("optimizer"))
      fail("the snapshot holds no optimizer state");
    if (sharded && !scalars.contains(sharded_key)) {
      fail(base::detail::str("the snapshot holds no ", sharded_key,
                             " sharded state (it was saved without TrainingState::",
                             state.zero_optimizer ? "zero_optimizer" : "fully_sharded", ")"));
    }
    if (state.grad_scaler)
      saved.scaler = detail::grad_scaler_from_json(scalars, *state.grad_scaler, file.path);
    if (state.model && !scalars.value("model", false)) fail("the snapshot holds no model");
  } catch (const json::exception& e) {
    fail(std::string("malformed scalars record: ") + e.what());
  }
  return saved;
}

// Plan: the model's saved tensors matched to its live ones, every saved
// model tensor accounted for.
void plan_model_copies(const SnapshotFile& file, const TrainingState& state, RestorePlan& plan) {
  auto fail = [&](const std::string& problem) { restore_failure(file, problem); };
  std::set<std::string> expected;
  for (bool parameters : {true, false}) {
    if (parameters && state.fully_sharded) continue;  // in the shards
    auto items =
        parameters ? state.model->named_parameters(true) : state.model->named_buffers(true);
    std::string kind = parameters ? "parameter" : "buffer";
    for (const auto& item : items) {
      if (!item.value().defined()) continue;
      std::string key = "model/" + std::string(parameters ? "param/" : "buffer/") + item.key();
      auto found = file.tensors.find(key);
      if (found == file.tensors.end())
        fail("model " + kind + " '" + item.key() + "' is not in the snapshot");
      if (!found->second.sizes().equals(item.value().sizes()) ||
          found->second.scalar_type() != item.value().scalar_type()) {
        fail("model " + kind + " '" + item.key() + "' is " +
             detail::describe_tensor(found->second) + " in the snapshot but " +
             detail::describe_tensor(item.value()) + " in the model");
      }
      expected.insert(key);
      plan.model_copies.emplace_back(item.value(), &found->second);
    }
  }
  for (const auto& entry : file.tensors) {
    if (entry.first.rfind("model/", 0) == 0 && expected.count(entry.first) == 0) {
      fail("the snapshot has " + entry.first + ", which the model lacks");
    }
  }
}

// Plan: the RNG states to set, or at another world size the seed to derive
// (Note [Resuming at another world size]).
void plan_rng(const SnapshotFile& file, int rank, int world_size, RestorePlan& plan) {
  const bool resized = world_size != 0 && static_cast<uint32_t>(world_size) != file.world_size;
  if (resized) {
    auto saved = file.tensors.find("rng/rank0/cpu");
    if (saved == file.tensors.end()) {
      warn_no_rng_state(file.path + " holds no RNG state");
    } else {
      plan.rng_seed = derived_rng_seed(saved->second, rank);
    }
    return;
  }
  std::string head = base::detail::str("rng/rank", rank, "/");
  for (auto& [device, generator] : generators()) {
    auto found = file.tensors.find(head + device);
    if (found == file.tensors.end()) continue;
    at::Tensor current = generator_state(generator);
    if (!found->second.sizes().equals(current.sizes()) ||
        found->second.scalar_type() != at::kByte) {
      restore_failure(file, "RNG state " + found->first + " is " +
                                detail::describe_tensor(found->second) + ", this generator's is " +
                                detail::describe_tensor(current));
    }
    plan.rng_states.emplace_back(generator, &found->second);
  }
  if (plan.rng_states.empty()) {
    warn_no_rng_state(base::detail::str(file.path, " holds no RNG state for rank ", rank));
  }
}

// Check and plan (Note [Restoring in three steps]).
RestorePlan plan_restore(const SnapshotFile& file, TrainingState& state, int rank, int world_size,
                         bool with_shards) {
  RestorePlan plan;
  plan.sharded = with_shards ? detail::sharded_part(state) : nullptr;
  plan.sharded_key = plan.sharded ? detail::sharded_record_key(*plan.sharded) : "";
  plan.scalars = check_scalars(file, state, plan.sharded, plan.sharded_key);
  const json& scalars = plan.scalars.record;
  if (state.model) plan_model_copies(file, state, plan);
  if (state.optimizer) {
    detail::check_optimizer(file.path, scalars.at("optimizer"), file.tensors, *state.optimizer);
  }
  if (plan.sharded) {
    plan.shards =
        detail::prepare_shard_import(file.path, scalars.at(plan.sharded_key), *plan.sharded);
  }
  if (state.include_rng) plan_rng(file, rank, world_size, plan);
  return plan;
}

// Apply (Note [Restoring in three steps]): nothing here can find a mismatch.
void apply_restore(const SnapshotFile& file, RestorePlan& plan, TrainingState& state) {
  const json& scalars = plan.scalars.record;
  {
    torch::NoGradGuard no_grad;
    for (auto& [live, saved] : plan.model_copies) live.copy_(*saved);
  }
  if (state.optimizer)
    detail::import_optimizer(scalars.at("optimizer"), file.tensors, *state.optimizer);
  if (plan.shards) detail::apply_shard_import(*plan.shards, *plan.sharded);
  if (state.scheduler)
    detail::set_scheduler_step_count(*state.scheduler, plan.scalars.scheduler_steps);
  if (state.grad_scaler) state.grad_scaler->load_state(plan.scalars.scaler);
  state.epoch = plan.scalars.epoch;
  state.step_in_epoch = plan.scalars.step_in_epoch;
  state.samples_in_epoch = plan.scalars.samples_in_epoch;
  state.counters = std::move(plan.scalars.counters);
  state.metadata = std::move(plan.scalars.metadata);
  std::map<std::string, at::Tensor> extras;
  for (const auto& [key, saved] : file.tensors) {
    if (key.rfind("extra/", 0) == 0) extras.emplace(key.substr(6), saved);
  }
  detail::adopt_extra_tensors(extras, state);
  for (auto& [generator, saved] : plan.rng_states) {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(*saved);
  }
  if (plan.rng_seed) {
    for (auto& [device, generator] : generators()) {
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_current_seed(*plan.rng_seed);
    }
  }
}

void restore_state(const SnapshotFile& file, TrainingState& state, int rank, int world_size,
                   bool with_shards) {
  RestorePlan plan = plan_restore(file, state, rank, world_size, with_shards);
  apply_restore(file, plan, state);
}

}  // namespace

void restore_training_state(const SnapshotFile& file, TrainingState& state, int rank,
                            int world_size) {
  restore_state(file, state, rank, world_size, /*with_shards=*/true);
}

void detail::restore_unsharded(const SnapshotFile& file, TrainingState& state, int rank,
                               int world_size) {
  restore_state(file, state, rank, world_size, /*with_shards=*/false);
}

}  // namespace ddp::snapshot

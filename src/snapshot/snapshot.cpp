#include "ddp/snapshot/snapshot_manager.hpp"
#include "ddp/snapshot/errors.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <nlohmann/json.hpp>
#include <torch/cuda.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <optional>
#include <set>

#include "ddp/comm/process_group.hpp"
#include "snapshot/async_saves.hpp"
#include "snapshot/grad_scaler_state.hpp"
#include "comm/byte_exchange.hpp"
#include "snapshot/optimizer_state.hpp"
#include "snapshot/rng_states.hpp"
#include "snapshot/snapshot_directory.hpp"
#include "snapshot/snapshot_format.hpp"
#include "snapshot/snapshot_writing.hpp"
#include "snapshot/state_records.hpp"
#include "snapshot/sharded_state.hpp"
#include "comm/str.hpp"

namespace ddp::snapshot {
namespace {

using detail::gather_rng_states;
using detail::generator_state;
using detail::generators;
using detail::TensorMap;
using nlohmann::json;

void warn(const std::string& message) { std::cerr << "ddp: warning: " << message << std::endl; }

// Writes `state` (and the gathered RNG states) as the next snapshot, or as
// number `sequence` if it is not 0; rank 0.
std::string write_snapshot(const SnapshotOptions& options, const TrainingState& state,
                           const TensorMap& rng, const json& sharded_record, int world_size,
                           uint64_t& sequence) {
  if (sequence == 0) sequence = detail::next_snapshot_sequence(options);
  detail::StateRecords records = detail::state_records(state, rng, sharded_record, world_size);
  return detail::write_main_file(options, records.tensors, detail::scalars_text(records.scalars),
                                 world_size, sequence);
}

}  // namespace

SnapshotManager::SnapshotManager(SnapshotOptions options, std::shared_ptr<ProcessGroup> group)
    : group_(std::move(group)), options_(std::move(options)) {
  if (!group_) throw ConfigError("SnapshotManager needs a process group, got a null pointer");
  if (options_.directory().empty()) {
    throw ConfigError("SnapshotOptions: directory is empty; set it to where snapshots should live");
  }
  if (options_.keep_last() < 1) {
    throw ConfigError(comm::detail::str("SnapshotOptions: keep_last is ", options_.keep_last(),
                                        "; it must be at least 1"));
  }
  const std::string& prefix = options_.prefix();
  if (prefix.empty() || prefix.find('/') != std::string::npos || prefix[0] == '.') {
    throw ConfigError("SnapshotOptions: prefix '" + prefix +
                      "' must be non-empty, contain no '/' and not start with '.'");
  }
}

std::string SnapshotManager::save(const TrainingState& state) {
  settle();  // Note [An asynchronous save]
  const parallel::ShardedState* sharded = detail::sharded_part(state);
  TensorMap rng;
  if (state.include_rng) rng = gather_rng_states(*group_);  // a collective: every rank
  uint64_t sequence = 0;
  json sharded_record;
  if (sharded != nullptr) {
    sharded_record = detail::save_shards(options_, *group_, *sharded, sequence);
  }
  std::exception_ptr failure;
  std::string path;
  if (group_->rank() == 0) {
    try {
      path = write_snapshot(options_, state, rng, sharded_record, group_->size(), sequence);
    } catch (...) {
      failure = std::current_exception();
    }
  }
  if (group_->size() > 1) {  // rank 0's outcome; the others wait here
    at::Tensor outcome =
        at::tensor({failure ? int64_t{0} : int64_t{1}, static_cast<int64_t>(sequence)});
    group_->broadcast(outcome, 0);
    if (group_->rank() != 0) {
      if (outcome[0].item<int64_t>() != 1) {
        throw SnapshotError("rank 0 could not write a snapshot into " + options_.directory() +
                            "; its error says why");
      }
      path = detail::snapshot_path(options_, static_cast<uint64_t>(outcome[1].item<int64_t>()));
    }
  }
  if (failure) std::rethrow_exception(failure);
  return path;
}

bool SnapshotManager::resume(TrainingState& state) {
  settle();  // Note [An asynchronous save]
  std::optional<SnapshotFile> chosen;
  int64_t sequence = -1;
  for (const auto& candidate :
       detail::snapshot_candidates(options_.directory(), options_.prefix())) {
    try {
      chosen = detail::read_snapshot(candidate.path);
      sequence = static_cast<int64_t>(candidate.sequence);
      break;
    } catch (const SnapshotError& e) {
      warn(std::string("skipping an unusable snapshot: ") + e.what());
    }
  }
  if (group_->size() > 1) {  // every rank must resume from the same file
    at::Tensor lowest = at::full({1}, sequence, at::kLong), highest = lowest.clone();
    group_->all_reduce(lowest, ReduceOp::kMin);
    group_->all_reduce(highest, ReduceOp::kMax);
    if (lowest.item<int64_t>() != highest.item<int64_t>()) {
      throw SnapshotError(
          comm::detail::str("ranks disagree on the newest valid snapshot in ", options_.directory(),
                            ": rank ", group_->rank(), " found sequence ", sequence,
                            " (-1: none), others between ", lowest.item<int64_t>(), " and ",
                            highest.item<int64_t>(), "; every rank must see the same directory"));
    }
  }
  if (!chosen) return false;
  restore_training_state(*chosen, state, group_->rank(), group_->size());
  if (chosen->world_size != static_cast<uint32_t>(group_->size()) && group_->rank() == 0) {
    // Note [Resuming at another world size]
    std::cerr << "ddp: resuming " << chosen->path << ", written by " << chosen->world_size
              << " rank(s), at " << group_->size() << ": the model, optimizer, scheduler and "
              << "scaler load unchanged; the epoch continues from sample " << state.samples_in_epoch
              << " of its order (TrainingState::samples_in_epoch), shared out among "
              << group_->size() << " rank(s); "
              << (state.include_rng ? "each rank's generators are seeded from rank 0's saved "
                                      "state and its rank"
                                    : "the generators keep their state")
              << "." << std::endl;
  }
  return true;
}

std::vector<std::string> SnapshotManager::list() const {
  std::vector<std::string> paths;
  for (auto& candidate : detail::snapshot_candidates(options_.directory(), options_.prefix())) {
    paths.push_back(std::move(candidate.path));
  }
  return paths;
}

SnapshotFile read_snapshot_file(const std::string& path) { return detail::read_snapshot(path); }

namespace {

// restore_training_state(), with its sharded part or without it
// (detail::restore_unsharded()).
void restore_state(const SnapshotFile& file, TrainingState& state, int rank, int world_size,
                   bool with_shards) {
  auto fail = [&](const std::string& problem) { throw SnapshotError(file.path + ": " + problem); };
  parallel::ShardedState* sharded = with_shards ? detail::sharded_part(state) : nullptr;
  const char* sharded_key = sharded ? detail::sharded_record_key(*sharded) : "";
  const TensorMap& tensors = file.tensors;
  json scalars;
  int64_t epoch = 0, step_in_epoch = 0, samples_in_epoch = 0;
  unsigned scheduler_steps = 0;
  std::map<std::string, int64_t> counters;
  std::map<std::string, std::string> metadata;
  amp::GradScalerState scaler;
  try {  // Check everything first; nothing live changes until all fits.
    scalars = json::parse(file.scalars_json);
    epoch = scalars.at("epoch").get<int64_t>();
    step_in_epoch = scalars.at("step_in_epoch").get<int64_t>();
    samples_in_epoch = scalars.value("samples_in_epoch", int64_t{0});
    counters = scalars.at("counters").get<std::map<std::string, int64_t>>();
    metadata = scalars.at("metadata").get<std::map<std::string, std::string>>();
    if (state.scheduler) {
      if (!scalars.contains("scheduler"))
        fail("the snapshot holds no learning-rate scheduler state");
      scheduler_steps = scalars.at("scheduler").at("step_count").get<unsigned>();
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
      fail(comm::detail::str("the snapshot holds no ", sharded_key,
                             " sharded state (it was saved without TrainingState::",
                             state.zero_optimizer ? "zero_optimizer" : "fully_sharded", ")"));
    }
    if (state.grad_scaler)
      scaler = detail::grad_scaler_from_json(scalars, *state.grad_scaler, file.path);
  } catch (const json::exception& e) {
    fail(std::string("malformed scalars record: ") + e.what());
  }
  std::vector<std::pair<at::Tensor, const at::Tensor*>> model_copies;  // live <- saved
  if (state.model) {
    if (!scalars.value("model", false)) fail("the snapshot holds no model");
    std::set<std::string> expected;
    for (bool parameters : {true, false}) {
      if (parameters && state.fully_sharded) continue;  // in the shards
      auto items =
          parameters ? state.model->named_parameters(true) : state.model->named_buffers(true);
      std::string kind = parameters ? "parameter" : "buffer";
      for (const auto& item : items) {
        if (!item.value().defined()) continue;
        std::string key = "model/" + std::string(parameters ? "param/" : "buffer/") + item.key();
        auto found = tensors.find(key);
        if (found == tensors.end())
          fail("model " + kind + " '" + item.key() + "' is not in the snapshot");
        if (!found->second.sizes().equals(item.value().sizes()) ||
            found->second.scalar_type() != item.value().scalar_type()) {
          fail("model " + kind + " '" + item.key() + "' is " +
               detail::describe_tensor(found->second) + " in the snapshot but " +
               detail::describe_tensor(item.value()) + " in the model");
        }
        expected.insert(key);
        model_copies.emplace_back(item.value(), &found->second);
      }
    }
    for (const auto& entry : tensors) {
      if (entry.first.rfind("model/", 0) == 0 && expected.count(entry.first) == 0) {
        fail("the snapshot has " + entry.first + ", which the model lacks");
      }
    }
  }
  if (state.optimizer) {
    detail::check_optimizer(file.path, scalars.at("optimizer"), tensors, *state.optimizer);
  }
  std::optional<detail::ShardImport> shards;
  if (sharded) shards = detail::prepare_shard_import(file.path, scalars.at(sharded_key), *sharded);
  std::vector<std::pair<at::Generator, const at::Tensor*>> rng_states;
  std::optional<uint64_t> rng_seed;  // Note [Resuming at another world size]
  const bool resized = world_size != 0 && static_cast<uint32_t>(world_size) != file.world_size;
  if (state.include_rng && resized) {
    auto saved = tensors.find("rng/rank0/cpu");
    if (saved == tensors.end()) {
      warn(file.path + " holds no RNG state; the generators keep their current state");
    } else {
      rng_seed = derived_rng_seed(saved->second, rank);
    }
  } else if (state.include_rng) {
    std::string head = comm::detail::str("rng/rank", rank, "/");
    for (auto& [device, generator] : generators()) {
      auto found = tensors.find(head + device);
      if (found == tensors.end()) continue;
      at::Tensor current = generator_state(generator);
      if (!found->second.sizes().equals(current.sizes()) ||
          found->second.scalar_type() != at::kByte) {
        fail("RNG state " + found->first + " is " + detail::describe_tensor(found->second) +
             ", this generator's is " + detail::describe_tensor(current));
      }
      rng_states.emplace_back(generator, &found->second);
    }
    if (rng_states.empty()) {
      warn(comm::detail::str(file.path, " holds no RNG state for rank ", rank,
                             "; the generators keep their current state"));
    }
  }

  // Apply.
  {
    torch::NoGradGuard no_grad;
    for (auto& [live, saved] : model_copies) live.copy_(*saved);
  }
  if (state.optimizer) detail::import_optimizer(scalars.at("optimizer"), tensors, *state.optimizer);
  if (shards) detail::apply_shard_import(*shards, *sharded);
  if (state.scheduler) detail::set_scheduler_step_count(*state.scheduler, scheduler_steps);
  if (state.grad_scaler) state.grad_scaler->load_state(scaler);
  state.epoch = epoch;
  state.step_in_epoch = step_in_epoch;
  state.samples_in_epoch = samples_in_epoch;
  state.counters = std::move(counters);
  state.metadata = std::move(metadata);
  std::map<std::string, at::Tensor> extras;
  for (const auto& [key, saved] : tensors) {
    if (key.rfind("extra/", 0) != 0) continue;
    std::string name = key.substr(6);
    auto live = state.extra_tensors.find(name);
    if (live != state.extra_tensors.end() && live->second.defined() &&
        live->second.sizes().equals(saved.sizes()) &&
        live->second.scalar_type() == saved.scalar_type()) {
      torch::NoGradGuard no_grad;
      live->second.copy_(saved);  // in place: aliases of the live tensor see it
      extras.emplace(name, live->second);
    } else {
      extras.emplace(name, saved.clone());
    }
  }
  state.extra_tensors = std::move(extras);
  for (auto& [generator, saved] : rng_states) {
    std::lock_guard<std::mutex> lock(generator.mutex());
    generator.set_state(*saved);
  }
  if (rng_seed) {
    for (auto& [device, generator] : generators()) {
      std::lock_guard<std::mutex> lock(generator.mutex());
      generator.set_current_seed(*rng_seed);
    }
  }
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

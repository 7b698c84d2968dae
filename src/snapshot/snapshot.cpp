#include "ddp/snapshot/errors.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>
#include <torch/cuda.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <exception>
#include <filesystem>
#include <iostream>
#include <mutex>
#include <optional>

#include "base/str.hpp"
#include "comm/byte_exchange.hpp"
#include "ddp/comm/process_group.hpp"
#include "snapshot/async_saves.hpp"
#include "snapshot/rng_states.hpp"
#include "snapshot/sharded_state.hpp"
#include "snapshot/snapshot_directory.hpp"
#include "snapshot/snapshot_format.hpp"
#include "snapshot/snapshot_writing.hpp"
#include "snapshot/state_records.hpp"

namespace ddp::snapshot {
namespace {

using detail::gather_rng_states;
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
    throw ConfigError(base::detail::str("SnapshotOptions: keep_last is ", options_.keep_last(),
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
          base::detail::str("ranks disagree on the newest valid snapshot in ", options_.directory(),
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

}  // namespace ddp::snapshot

#pragma once

// Internal: the records that describe a TrainingState (Note [What a
// snapshot file is] in ddp/snapshot/snapshot_manager.hpp), built once for
// both of their destinations: a snapshot file (SnapshotManager::save) and a
// copy in memory (capture_training_state, which elastic::State commits).

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "ddp/snapshot/snapshot_manager.hpp"

namespace ddp::snapshot::detail {

/// A training state's records: its tensors in the order a file holds them
/// (they alias the live tensors) and its "scalars" record.
struct StateRecords {
  std::vector<std::pair<std::string, at::Tensor>> tensors;
  nlohmann::json scalars;
};

/// The records of `state`, with the generator states `rng` (named
/// rng/rank<r>/<device>), its sharded part's record `sharded_record` (null:
/// none; under sharded_record_key()) and the world size that wrote them.
/// With fully_sharded, the model's parameters are left out (they live in
/// the shards) and its buffers kept.
/// \throws SnapshotError when the optimizer is not one snapshots support.
StateRecords state_records(const snapshot::TrainingState& state,
                           const std::map<std::string, at::Tensor>& rng,
                           const nlohmann::json& sharded_record, int world_size);

/// capture_training_state() without the sharded part (zero_optimizer's
/// or fully_sharded's shards, which elastic::State commits apart).
SnapshotFile capture_unsharded(const TrainingState& state);

/// restore_training_state() without the sharded part: its record in `file`
/// is not read, and with fully_sharded the model's parameters are not
/// restored (elastic::State restores the shards apart).
void restore_unsharded(const SnapshotFile& file, TrainingState& state, int rank = 0,
                       int world_size = 0);

/// The scalars every saved form of `state` carries, a snapshot and an
/// exported checkpoint alike: epoch, step_in_epoch, samples_in_epoch,
/// counters and metadata.
nlohmann::json position_scalars(const TrainingState& state);

/// The extra tensors of a snapshot or checkpoint (`saved`, by name) made
/// the state's, as on resume: a live tensor of the same shape and dtype is
/// written in place, so that its aliases see the value; any other is a copy
/// of the saved one; live names that `saved` lacks are dropped.
void adopt_extra_tensors(const std::map<std::string, at::Tensor>& saved, TrainingState& state);

/// The "scalars" record as text. \throws SnapshotError when the metadata is
/// not valid UTF-8.
std::string scalars_text(const nlohmann::json& scalars);

}  // namespace ddp::snapshot::detail

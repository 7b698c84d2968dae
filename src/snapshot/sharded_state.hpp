#pragma once

// Internal: a rank's shard of a parallel::ShardedState in a snapshot (Note
// [Sharded state in a snapshot] in ddp/snapshot/snapshot_manager.hpp):
// writing this rank's shard file, and cutting this rank's new pieces out of
// the saved ones, whether they are files or kept in memory (elastic::State,
// Note [Sharded state in memory] in ddp/elastic/state.hpp).

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "ddp/parallel/sharded_state.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"
#include "snapshot/optimizer_state.hpp"

namespace ddp::snapshot::detail {

/// The sharded part of `state`: its zero_optimizer or fully_sharded, or
/// null. \throws SnapshotError when it has more than one of optimizer,
///   zero_optimizer and fully_sharded.
parallel::ShardedState* sharded_part(const TrainingState& state);

/// The main file's scalars key for the record of `state`'s sharded part:
/// "zero" (ZeroRedundancyOptimizer) or "fully_sharded".
const char* sharded_record_key(const parallel::ShardedState& sharded);

/// \throws SnapshotError unless `sharded` works over a group of the same
///   rank and size as `group`.
void check_sharded_group(const parallel::ShardedState& sharded, const ProcessGroup& group);

/// Every rank writes its shard of `sharded` as part of the next snapshot,
/// numbered by rank 0 (`sequence` is set on every rank); returns the main
/// file's record on every rank. A collective; throws SnapshotError on
/// every rank if any rank could not write its shard.
nlohmann::json save_shards(const snapshot::SnapshotOptions& options, ProcessGroup& group,
                           const parallel::ShardedState& sharded, uint64_t& sequence);

/// Which rows of a replicated state (Note [Replicated shards] in
/// ddp/parallel/sharded_state.hpp) save their pieces: the first (files),
/// or every one (commits in memory). The others' pieces have length 0.
enum class RowsSaved { kFirst, kEvery };

/// This rank's shard as a shard file holds it: each piece's optimizer state
/// (optim/g0/p<j>/<field>, cut to the piece's length) and, where the state
/// holds values, its elements (value/p<j>); the "scalars" record
/// {"optimizer", "rank", "pieces"}.
/// \throws SnapshotError for an optimizer snapshots do not support, or one
///   with several param groups.
struct ShardRecords {
  TensorMap tensors;
  nlohmann::json scalars;
};
ShardRecords shard_records(const parallel::ShardedState& sharded, RowsSaved rows);

/// A snapshot's record of `sharded`: every rank's pieces (`pieces_by_rank`,
/// each as a shard's "pieces"), each flattened parameter's elements and,
/// for a replicated state, the ranks of a row ("shard_ranks").
nlohmann::json shards_record(const parallel::ShardedState& sharded,
                             const std::vector<nlohmann::json>& pieces_by_rank);

/// Old rank r's shard as a SnapshotFile (its tensors and its scalars
/// record), or null when it is not at hand.
using ShardLookup = std::function<const snapshot::SnapshotFile*(int rank)>;

/// This rank's state, cut out of the saved shards that overlap its pieces
/// and checked against `sharded`'s local optimizer: the optimizer's
/// description and tensors, and (holds_values()) each local parameter's
/// values, zero past its piece.
struct ShardImport {
  nlohmann::json description;
  TensorMap tensors;
  std::vector<at::Tensor> values;
};
/// The shards are `main_path`'s shard files. Throws SnapshotError naming the
/// first problem (another model, a missing or corrupt shard file, elements
/// no shard holds, another optimizer).
ShardImport prepare_shard_import(const std::string& main_path, const nlohmann::json& record,
                                 const parallel::ShardedState& sharded);

/// As prepare_shard_import(), with the shards from `shard` (read only where
/// they overlap this rank's pieces); messages start with `source`. A shard
/// that is needed and not at hand is a SnapshotError.
ShardImport prepare_shard_import(const std::string& source, const nlohmann::json& record,
                                 const parallel::ShardedState& sharded, const ShardLookup& shard);

/// Puts `import` into `sharded`: the values into the local parameters, the
/// state into the local optimizer.
void apply_shard_import(const ShardImport& import, parallel::ShardedState& sharded);

}  // namespace ddp::snapshot::detail

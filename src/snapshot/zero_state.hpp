#pragma once

// Internal: a ZeroRedundancyOptimizer's shard in a snapshot (Note [Sharded
// optimizer state in a snapshot] in ddp/snapshot/snapshot_manager.hpp):
// writing this rank's shard file, and cutting this rank's new shard out of
// the saved ones, whether they are files or kept in memory (elastic::State,
// Note [ZeRO shards in memory] in ddp/elastic/state.hpp).

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <vector>
#include <string>

#include "ddp/parallel/zero_redundancy_optimizer.hpp"
#include "snapshot/optimizer_state.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"

namespace ddp::snapshot::detail {

/// Every rank writes its shard of `zero`'s state as part of the next
/// snapshot, numbered by rank 0 (`sequence` is set on every rank); returns
/// the main file's "zero" record on every rank. A collective; throws
/// SnapshotError on every rank if any rank could not write its shard.
nlohmann::json save_zero_shards(const snapshot::SnapshotOptions& options, ProcessGroup& group,
                                const ZeroRedundancyOptimizer& zero, uint64_t& sequence);

/// This rank's shard of `zero`'s state as a shard file holds it: the local
/// optimizer's state tensors (named by position, aliasing the live ones)
/// and the "scalars" record {"optimizer", "rank", "pieces"}.
/// \throws SnapshotError for an optimizer snapshots do not support, or one
///   with several param groups.
struct ZeroShardRecords {
  TensorMap tensors;
  nlohmann::json scalars;
};
ZeroShardRecords zero_shard_records(const ZeroRedundancyOptimizer& zero);

/// A snapshot's "zero" record: every rank's pieces (`pieces_by_rank`, each
/// as a shard's "pieces") and each of `zero`'s parameters' elements.
nlohmann::json zero_record(const ZeroRedundancyOptimizer& zero,
                           const std::vector<nlohmann::json>& pieces_by_rank);

/// Old rank r's shard as a SnapshotFile (its tensors and its scalars
/// record), or null when it is not at hand.
using ZeroShardLookup = std::function<const snapshot::SnapshotFile*(int rank)>;

/// This rank's optimizer state, cut out of the shard files of `main_path`
/// that overlap its pieces, checked against `zero`'s local optimizer.
struct ZeroImport {
  nlohmann::json description;
  TensorMap tensors;
};
/// Throws SnapshotError naming the first problem (another model, a missing
/// or corrupt shard file, elements no shard holds, another optimizer).
ZeroImport prepare_zero_import(const std::string& main_path, const nlohmann::json& record,
                               const ZeroRedundancyOptimizer& zero);

/// As prepare_zero_import(), with the shards from `shard` (read only where
/// they overlap this rank's pieces); messages start with `source`. A shard
/// that is needed and not at hand is a SnapshotError.
ZeroImport prepare_zero_import(const std::string& source, const nlohmann::json& record,
                               const ZeroRedundancyOptimizer& zero, const ZeroShardLookup& shard);

}  // namespace ddp::snapshot::detail

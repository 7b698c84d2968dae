#pragma once

// Internal: a ZeroRedundancyOptimizer's shard in a snapshot (Note [Sharded
// optimizer state in a snapshot] in ddp/snapshot/snapshot_manager.hpp):
// writing this rank's shard file, and cutting this rank's new shard out of
// the saved ones.

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <cstdint>
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

}  // namespace ddp::snapshot::detail

#pragma once

// FullyShardedDataParallel snapshots, run by ddp_test_worker
// ("fsdp-snapshot"): phase "save" trains 4 steps on 2 ranks with AdamW in
// two param groups (no weight decay on biases), a unit per Sequential
// entry, and saves after steps 3 and 4 (each rank writes its pieces of the
// parameters and of the optimizer state; keep_last 1); phase "resume" (on
// 1, 2 or 3 ranks) resumes into the model wrapped as one unit, by
// parameter name, re-sharding where the world size differs, and trains 4
// more steps. The "-hybrid" phases (save on 2 nodes of 2 ranks, resume on
// 2 nodes of 1 or 2) shard within each node and replicate across them;
// "resume-from-hybrid" resumes their snapshot without a mesh, on 1 or 3
// ranks. Each check is reported by name, each name written once,
// below; the parent test expects fsdp_snapshot_check_names(phase, rank,
// world).

#include <memory>
#include <set>
#include <string>

#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::testing {

/// Whether `phase` shards on a DeviceMesh of a row per node.
inline bool is_hybrid(const std::string& phase) {
  const std::string suffix = "-hybrid";
  return phase.size() > suffix.size() &&
         phase.compare(phase.size() - suffix.size(), suffix.size(), suffix) == 0;
}

/// Whether a resume in `phase` on `world` ranks runs as the saving job did
/// (2 ranks, or 2 nodes of 2 for the hybrid phases): then it continues it
/// bit for bit.
inline bool continues_saved_job(const std::string& phase, int world) {
  return (phase == "resume" && world == 2) || (phase == "resume-hybrid" && world == 4);
}

/// Runs `phase` ("save", "save-async", "save-hybrid", "resume",
/// "resume-hybrid", "resume-from-hybrid") with snapshots under `directory`;
/// prints each check by name and returns how many failed.
int check_fsdp_snapshot(const std::shared_ptr<ProcessGroup>& group, const std::string& phase,
                        const std::string& directory);

/// The names of check_fsdp_snapshot()'s checks.
namespace fsdp_snapshot_check {
/// On rank 0 when saving.
inline const std::string kFilesWritten =
    "the directory holds the newest main file and one shard per rank, and no model parameter in "
    "the main file";
/// On rank 0 when saving on a mesh.
inline const std::string kFirstRowWrites =
    "the first row's shards hold every parameter element once, the second row's none";
/// When resuming.
inline const std::string kResumed = "resume finds the snapshot of step 4";
inline const std::string kSameValues =
    "the full parameters after resuming equal those saved, bit for bit";
inline const std::string kBuffer = "the module's buffer is restored from the main file";
inline const std::string kMatchesOneProcess =
    "4 more steps, resumed with another wrap policy, match one process's 8 steps with AdamW in "
    "the same two param groups (1e-5)";
inline const std::string kPlainRefused =
    "a plain optimizer cannot resume the sharded state: SnapshotError naming fully_sharded";
inline const std::string kConsolidated =
    "save_consolidated streams one unit at a time (peak: the largest unit) and a plain model "
    "restored from it holds the full parameters and buffers bit for bit";
inline const std::string kOtherOptimizerRefused =
    "FullyShardedState refuses an optimizer over other tensors: ConfigError";
inline const std::string kOtherShapeRefused =
    "a model whose parameter has another shape is refused: SnapshotError naming it and both "
    "shapes";
/// When resuming as the saving job ran (continues_saved_job()).
inline const std::string kContinuesExactly =
    "at the same world size and mesh, 4 more steps (one unit) equal 8 uninterrupted steps (a "
    "unit per entry) bit for bit";
}  // namespace fsdp_snapshot_check

/// The names check_fsdp_snapshot() reports on `rank` of `world` in `phase`.
inline std::set<std::string> fsdp_snapshot_check_names(const std::string& phase, int rank,
                                                       int world) {
  using namespace fsdp_snapshot_check;  // NOLINT(google-build-using-namespace)
  if (phase.rfind("save", 0) == 0) {
    if (rank != 0) return {};
    if (is_hybrid(phase)) return {kFilesWritten, kFirstRowWrites};
    return {kFilesWritten};
  }
  std::set<std::string> names{kResumed,           kSameValues,   kBuffer,
                              kMatchesOneProcess, kPlainRefused, kOtherOptimizerRefused,
                              kOtherShapeRefused, kConsolidated};
  if (continues_saved_job(phase, world)) names.insert(kContinuesExactly);
  return names;
}

}  // namespace ddp::testing

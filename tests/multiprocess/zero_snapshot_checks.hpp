#pragma once

// ZeroRedundancyOptimizer snapshots, run by ddp_test_worker ("zero-snapshot"):
// phase "save" trains 4 steps on 2 ranks and saves after steps 3 and 4 (each
// rank writes its shard; keep_last 1); phase "resume" (on 1 or 3 ranks)
// resumes, re-sharding the state, trains 4 more steps and compares with one
// process that trained all 8 steps with the whole optimizer. Stage 1 with
// Adam beside DDP and stage 2 with SGD with momentum, each in a directory of
// its own. Phases "save-dcp" and "resume-dcp" do the same through PyTorch's
// Distributed Checkpoint format (saved after step 4 into <dir>/dcp). Each
// check is reported by name, each name written once, below;
// the parent test expects zero_snapshot_check_names(phase).

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/named_checks.hpp"
#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::testing {

/// Runs `phase` ("save" or "resume") with snapshots under `directory`;
/// prints each check by name and returns how many failed.
int check_zero_snapshot(const std::shared_ptr<ProcessGroup>& group, const std::string& phase,
                        const std::string& directory);

/// The names of check_zero_snapshot()'s checks.
namespace zero_snapshot_check {
/// The cases, each in a directory of its own.
inline const std::string kStage1Adam = "stage 1, Adam";
inline const std::string kStage2Sgd = "stage 2, SGD with momentum";
inline std::vector<std::string> cases() { return {kStage1Adam, kStage2Sgd}; }
/// What each case checks when saving (on rank 0).
inline const std::string kFilesWritten =
    "the directory holds the newest main file and one shard per rank (DCP: .metadata and a file "
    "per rank, two on rank 0)";
/// What each case checks when resuming.
inline const std::string kResumed = "resume finds the snapshot of step 4";
inline const std::string kNewShard = "this rank holds the state of its new shard";
inline const std::string kParameters = "parameters equal one process's after 8 steps (1e-5)";
/// Once when resuming.
inline const std::string kPlainOptimizerRefused =
    "a plain optimizer cannot resume sharded state: SnapshotError naming zero_optimizer";
}  // namespace zero_snapshot_check

/// The names check_zero_snapshot() reports on `rank` in `phase`.
inline std::set<std::string> zero_snapshot_check_names(const std::string& phase, int rank) {
  using namespace zero_snapshot_check;  // NOLINT(google-build-using-namespace)
  std::set<std::string> names;
  if (phase == "resume") names.insert(kPlainOptimizerRefused);
  for (const auto& c : cases()) {
    if (phase.rfind("save", 0) == 0) {
      if (rank == 0) names.insert(check_name(c, kFilesWritten));
    } else {
      for (const auto& check : {kResumed, kNewShard, kParameters}) {
        names.insert(check_name(c, check));
      }
    }
  }
  return names;
}

}  // namespace ddp::testing

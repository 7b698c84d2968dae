#pragma once

// ZeroRedundancyOptimizer snapshots, run by ddp_test_worker ("zero-snapshot"):
// phase "save" trains 4 steps on 2 ranks and saves after steps 3 and 4 (each
// rank writes its shard; keep_last 1); phase "resume" (on 1 or 3 ranks)
// resumes, re-sharding the state, trains 4 more steps and compares with one
// process that trained all 8 steps with the whole optimizer. Stage 1 with
// Adam beside DDP and stage 2 with SGD with momentum, each in a directory of
// its own. The parent test expects zeroSnapshotCheckNames(phase).

#include <memory>
#include <set>
#include <string>

#include "ddp/process_group.hpp"

namespace ddp::testing {

/// Runs `phase` ("save" or "resume") with snapshots under `directory`;
/// prints each check by name and returns how many failed.
int checkZeroSnapshot(const std::shared_ptr<ProcessGroup>& group, const std::string& phase,
                      const std::string& directory);

/// The names checkZeroSnapshot() reports on `rank` in `phase`.
inline std::set<std::string> zeroSnapshotCheckNames(const std::string& phase, int rank) {
  std::set<std::string> names;
  for (const std::string c : {"stage 1, Adam", "stage 2, SGD with momentum"}) {
    if (phase == "save") {
      if (rank == 0) {
        names.insert(c + ": the directory holds the newest main file and one shard per rank");
      }
    } else {
      names.insert(c + ": resume finds the snapshot of step 4");
      names.insert(c + ": this rank holds the state of its new shard");
      names.insert(c + ": parameters equal one process's after 8 steps (1e-5)");
    }
  }
  if (phase == "resume") {
    names.insert(
        "a plain optimizer cannot resume sharded state: SnapshotError naming zero_optimizer");
  }
  return names;
}

}  // namespace ddp::testing

#pragma once

// ZeroRedundancyOptimizer on each rank of a group of 1 to 4 processes, run
// by ddp_test_worker ("zero"): stage 1 beside DistributedDataParallel and
// stage 2 on the bare model, with SGD with momentum, Adam and AdamW, against
// plain DistributedDataParallel with the same optimizer; the state each rank
// holds; the gradients stage 2 releases. Each check is reported by name;
// the parent test expects zeroCheckNames().

#include <memory>
#include <set>
#include <string>

#include "ddp/process_group.hpp"

namespace ddp::testing {

/// Runs every ZeRO case; prints each check by name and returns how many
/// failed.
int checkZero(const std::shared_ptr<ProcessGroup>& group);

/// The names checkZero() reports on every rank.
inline std::set<std::string> zeroCheckNames() {
  std::set<std::string> names;
  for (const std::string stage : {"stage 1", "stage 2"}) {
    for (const std::string optimizer : {"SGD with momentum", "Adam", "AdamW"}) {
      const std::string prefix = stage + ", " + optimizer + ": ";
      names.insert(prefix + "parameters equal plain DDP's after 5 steps (1e-6)");
      names.insert(prefix + "the state held is that of this rank's shard");
      names.insert(prefix + "the shards cover every parameter element once");
      names.insert(prefix + "the parameter that never gets a gradient is left alone");
    }
  }
  names.insert("stage 2: no full gradient is kept after step()");
  names.insert("stage 3 is a ConfigError naming the stages");
  return names;
}

}  // namespace ddp::testing

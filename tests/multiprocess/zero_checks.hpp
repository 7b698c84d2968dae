#pragma once

// ZeroRedundancyOptimizer on each rank of a group of 1 to 4 processes, run
// by ddp_test_worker ("zero"): stage 1 beside DistributedDataParallel and
// stage 2 on the bare model, with SGD with momentum, Adam and AdamW, against
// plain DistributedDataParallel with the same optimizer, in one bucket and
// two; the state each rank holds; stage 2's accumulation over two passes,
// its reduce-scatters overlapping backward (counted), the gradients it
// releases and the misuse it names. Each check is reported by name;
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
    for (const std::string optimizer : {"SGD with momentum", "Adam", "AdamW", "Adam, 2 buckets"}) {
      const std::string prefix = stage + ", " + optimizer + ": ";
      names.insert(prefix + "parameters equal plain DDP's after 5 steps (1e-6)");
      names.insert(prefix + "the buckets are as the cap makes them");
      names.insert(prefix + "the state held is that of this rank's shard");
      names.insert(prefix + "the shards cover every parameter element once");
      names.insert(prefix + "the parameter that never gets a gradient is left alone");
    }
  }
  names.insert("stage 2, 2 passes per step: the first pass's gradients stay in .grad");
  names.insert(
      "stage 2, 2 passes per step: parameters equal plain DDP's with no_sync() after 5 steps "
      "(1e-6)");
  names.insert("stage 2 overlaps backward: three buckets of 68, 272 and 144 elements");
  names.insert(
      "stage 2 overlaps backward: 2 reduce-scatters issued before the first layer's "
      "gradient");
  names.insert(
      "stage 2 overlaps backward: all 3 issued and every .grad released when backward "
      "returns");
  names.insert(
      "stage 2 overlaps backward: step() issues the usage all-reduce (none alone) and 3 "
      "all-gathers");
  names.insert("stage 2: a second backward before step() is refused");
  names.insert("stage 2: zero_grad() between backward and step() is refused");
  names.insert("a cap of 0 and 2 passes at stage 1 are refused naming the option");
  names.insert("stage 2: no full gradient is kept after step()");
  names.insert("stage 3 is a ConfigError naming the stages");
  return names;
}

}  // namespace ddp::testing

#pragma once

// Uneven inputs under ddp::Join, run on each rank of a 3-process group by
// ddp_test_worker ("join"): ranks train on different numbers of batches and
// are compared with one process that applies, at each step, the average of
// the gradients of the ranks that still had a batch. Each check is reported
// by name; the parent test expects joinCheckNames().

#include <memory>
#include <set>
#include <string>

#include "ddp/process_group.hpp"

namespace ddp::testing {

/// Runs every Join case; prints each check by name and returns how many
/// failed. Needs a group of 3 ranks.
int checkJoin(const std::shared_ptr<ProcessGroup>& group);

/// The names checkJoin() reports on every rank.
inline std::set<std::string> joinCheckNames() {
  std::set<std::string> names;
  for (const std::string& name : {"MLP, batches 3/5/8, divide by initial world size",
                                  "MLP, batches 8/3/5, divide by contributing ranks",
                                  "ConvNet, batches 0/2/3 (rank 0 joins before its first batch)",
                                  "MLP with static_graph, batches 0/3/5 (rank 0 shadows the "
                                  "recording)",
                                  "MLP, batches 2/4/3 of 3 micro-batches, 2 under no_sync"}) {
    names.insert(name + ": parameters match one process");
    names.insert(name + ": every rank ends with the same parameters and buffers");
    names.insert(name + ": join() names the last rank to join");
  }
  for (const std::string& name :
       {"ZeRO stage 1 with Adam beside DDP, batches 3/5/8, divide by initial world size",
        "ZeRO stage 2 with SGD with momentum, batches 8/0/5, divide by contributing ranks"}) {
    names.insert(name + ": parameters match one process");
    names.insert(name + ": every rank ends with the same parameters");
  }
  names.insert("throw_on_early_termination: every rank throws CollectiveError naming the count");
  return names;
}

}  // namespace ddp::testing

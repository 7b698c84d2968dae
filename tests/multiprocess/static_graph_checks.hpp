#pragma once

// DistributedDataParallel's static_graph, run on each rank of a 2-process
// group by ddp_test_worker ("static-graph"): a block applied twice under
// reentrant activation checkpointing, against one process on the whole
// batch; the counts it records; the errors when the ranks, or a later
// iteration, differ from the first. Each check is reported by name; the
// parent test expects staticGraphCheckNames().

#include <memory>
#include <set>
#include <string>

#include "ddp/process_group.hpp"

namespace ddp::testing {

/// Runs every static_graph case; prints each check by name and returns how
/// many failed. Needs a group of 2 ranks.
int checkStaticGraph(const std::shared_ptr<ProcessGroup>& group);

/// The names checkStaticGraph() reports on every rank.
inline std::set<std::string> staticGraphCheckNames() {
  std::set<std::string> names;
  for (const std::string& variant : {"static_graph",
                                     "static_graph, find_unused_parameters and "
                                     "gradient_as_bucket_view"}) {
    const std::string prefix = variant + ", block applied twice under reentrant checkpointing: ";
    names.insert(prefix + "parameters match one process after 4 steps");
    names.insert(prefix + "records 2 gradients per pass for the block, 0 for the spare layer");
    names.insert(prefix + "the spare layer, never used, keeps no gradient");
    names.insert(prefix + "no unused-parameter search");
    names.insert(prefix + "every bucket is reduced during backward after the first iteration");
  }
  names.insert("without static_graph: the second gradient is an error naming the option");
  names.insert(
      "without static_graph: reentrant checkpointing of a block applied once matches one "
      "process");
  names.insert(
      "first iterations that differ between ranks: every rank fails naming the block's "
      "parameters and each rank's count");
  names.insert(
      "an iteration that differs from the first: an error naming the parameters and the "
      "iteration");
  return names;
}

}  // namespace ddp::testing

#pragma once

// DistributedDataParallel's static_graph, run on each rank of a 2-process
// group by ddp_test_worker ("static-graph"): a block applied twice under
// reentrant activation checkpointing, against one process on the whole
// batch; the counts it records; the errors when the ranks, or a later
// iteration, differ from the first. Each check is reported by name, each
// name written once, below; the parent test expects static_graph_check_names().

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/named_checks.hpp"
#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::testing {

/// Runs every static_graph case; prints each check by name and returns how
/// many failed. Needs a group of 2 ranks.
int check_static_graph(const std::shared_ptr<ProcessGroup>& group);

/// The names of check_static_graph()'s checks.
namespace static_graph_check {
/// The options the block applied twice is trained with.
inline const std::string kStaticGraph = "static_graph";
inline const std::string kWithOtherOptions =
    "static_graph, find_unused_parameters and gradient_as_bucket_view";
inline std::vector<std::string> variants() { return {kStaticGraph, kWithOtherOptions}; }
/// The subject of each variant's checks.
inline std::string block_applied_twice(const std::string& variant) {
  return variant + ", block applied twice under reentrant checkpointing";
}
/// What each variant checks.
inline const std::string kParameters = "parameters match one process after 4 steps";
inline const std::string kGradientCounts =
    "records 2 gradients per pass for the block, 0 for the spare layer";
inline const std::string kSpareKeepsNoGradient = "the spare layer, never used, keeps no gradient";
inline const std::string kNoUnusedSearch = "no unused-parameter search";
inline const std::string kOverlap =
    "every bucket is reduced during backward after the first iteration";
inline std::vector<std::string> variant_checks() {
  return {kParameters, kGradientCounts, kSpareKeepsNoGradient, kNoUnusedSearch, kOverlap};
}

inline const std::string kSecondGradientWithout =
    "without static_graph: the second gradient is an error naming the option";
inline const std::string kAppliedOnceWithout =
    "without static_graph: reentrant checkpointing of a block applied once matches one process";
inline const std::string kRanksDiffer =
    "first iterations that differ between ranks: every rank fails naming the block's "
    "parameters and each rank's count";
inline const std::string kLaterIterationDiffers =
    "an iteration that differs from the first: an error naming the parameters and the "
    "iteration";
}  // namespace static_graph_check

/// The names check_static_graph() reports on every rank.
inline std::set<std::string> static_graph_check_names() {
  using namespace static_graph_check;  // NOLINT(google-build-using-namespace)
  std::set<std::string> names{kSecondGradientWithout, kAppliedOnceWithout, kRanksDiffer,
                              kLaterIterationDiffers};
  for (const auto& variant : variants()) {
    for (const auto& check : variant_checks()) {
      names.insert(check_name(block_applied_twice(variant), check));
    }
  }
  return names;
}

}  // namespace ddp::testing

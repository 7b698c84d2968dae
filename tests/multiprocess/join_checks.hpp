#pragma once

// Uneven inputs under ddp::Join, run on each rank of a 3-process group by
// ddp_test_worker ("join"): ranks train on different numbers of batches and
// are compared with one process that applies, at each step, the average of
// the gradients of the ranks that still had a batch. Each check is reported
// by name (tests/common/named_checks.hpp), each name written once, below;
// the parent test expects join_check_names().

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/named_checks.hpp"
#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::testing {

/// Runs every Join case; prints each check by name and returns how many
/// failed. Needs a group of 3 ranks.
int check_join(const std::shared_ptr<ProcessGroup>& group);

/// The names of check_join()'s checks: each case's, then what each checks.
namespace join_check {
inline const std::string kMlpByWorldSize = "MLP, batches 3/5/8, divide by initial world size";
inline const std::string kMlpByContributors = "MLP, batches 8/3/5, divide by contributing ranks";
inline const std::string kConvNetRank0JoinsFirst =
    "ConvNet, batches 0/2/3 (rank 0 joins before its first batch)";
inline const std::string kStaticGraph =
    "MLP with static_graph, batches 0/3/5 (rank 0 shadows the recording)";
inline const std::string kMicroBatches = "MLP, batches 2/4/3 of 3 micro-batches, 2 under no_sync";
/// The cases above, under DistributedDataParallel.
inline std::vector<std::string> ddp_cases() {
  return {kMlpByWorldSize, kMlpByContributors, kConvNetRank0JoinsFirst, kStaticGraph,
          kMicroBatches};
}
inline const std::string kZeroStage1 =
    "ZeRO stage 1 with Adam beside DDP, batches 3/5/8, divide by initial world size";
inline const std::string kZeroStage2 =
    "ZeRO stage 2 with SGD with momentum, batches 8/0/5, divide by contributing ranks";
/// The cases above, under ZeroRedundancyOptimizer.
inline std::vector<std::string> zero_cases() { return {kZeroStage1, kZeroStage2}; }

/// Every case's.
inline const std::string kParameters = "parameters match one process";
/// A DistributedDataParallel case's.
inline const std::string kSameStateEverywhere =
    "every rank ends with the same parameters and buffers";
inline const std::string kLastRankNamed = "join() names the last rank to join";
/// A ZeroRedundancyOptimizer case's.
inline const std::string kSameParametersEverywhere = "every rank ends with the same parameters";

inline const std::string kEarlyTermination =
    "throw_on_early_termination: every rank throws CollectiveError naming the count";
}  // namespace join_check

/// The names check_join() reports on every rank.
inline std::set<std::string> join_check_names() {
  using namespace join_check;  // NOLINT(google-build-using-namespace)
  std::set<std::string> names{kEarlyTermination};
  for (const auto& c : ddp_cases()) {
    for (const auto& check : {kParameters, kSameStateEverywhere, kLastRankNamed}) {
      names.insert(check_name(c, check));
    }
  }
  for (const auto& c : zero_cases()) {
    for (const auto& check : {kParameters, kSameParametersEverywhere}) {
      names.insert(check_name(c, check));
    }
  }
  return names;
}

}  // namespace ddp::testing

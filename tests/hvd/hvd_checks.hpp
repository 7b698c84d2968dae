#pragma once

// The checks hvd_test_worker makes (hvd_worker.cpp), each name written once,
// here: the worker reports them (tests/common/named_checks.hpp) and
// hvd_test.cpp expects them.

#include <algorithm>
#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "common/named_checks.hpp"
#include "ddp/hvd.hpp"

namespace ddp::testing {

/// The fusion threshold without `--fusion BYTES`: 64 MiB.
constexpr int64_t kDefaultFusionBytes = int64_t{64} << 20;

/// The threshold `--fusion BYTES` sets among a worker's arguments, else the
/// default.
inline int64_t fusion_threshold_of(const std::vector<std::string>& args) {
  const auto flag = std::find(args.begin(), args.end(), "--fusion");
  return flag != args.end() && flag + 1 != args.end() ? std::stoll(*(flag + 1))
                                                      : kDefaultFusionBytes;
}

namespace hvd_check {

/// The "train" scenario: DistributedOptimizer against one process.
constexpr int kTrainingSteps = 4;
inline const std::string kParameters =
    "parameters after " + std::to_string(kTrainingSteps) + " steps match one process";
inline const std::string kEveryGradientOnce = "the buffers hold every gradient once";
inline const std::string kBufferCount = "number of fusion buffers";
inline const std::string kWithinThreshold = "every fusion buffer within the threshold";
inline const std::string kStartedDuringBackward = "every buffer started during backward";
inline const std::string kOneReductionPerStep = "one reduction per step";

/// The fusion buffers `threshold` makes for the MLP's 6 gradients where it
/// fixes their number (one per gradient at 0, one for all at the default
/// and above), else 0: kBufferCount is checked only where it is not 0.
inline size_t fixed_buffer_count(int64_t threshold) {
  return threshold == 0 ? 6u : threshold >= kDefaultFusionBytes ? 1u : 0u;
}

/// The names the "train" scenario reports with `threshold`.
inline std::set<std::string> training_check_names(int64_t threshold) {
  std::set<std::string> names{kParameters, kEveryGradientOnce, kWithinThreshold,
                              kStartedDuringBackward, kOneReductionPerStep};
  if (fixed_buffer_count(threshold) != 0) names.insert(kBufferCount);
  return names;
}

/// The "broadcast-state" scenario: each optimizer's state, broadcast.
inline const std::string kSgd = "SGD";
inline const std::string kAdam = "Adam";
inline const std::string kAdamW = "AdamW";
inline const std::string kRmsprop = "RMSprop";
inline const std::string kAdagrad = "Adagrad";
/// What each optimizer checks.
inline const std::string kOptionsAndSteps = "options and steps equal rank 0's";
inline const std::string kStateTensors = "every state tensor equals rank 0's";
inline const std::string kParametersEqual = "parameters equal rank 0's";
inline const std::string kNextStep = "the next step continues rank 0's trajectory exactly";

/// The names the "broadcast-state" scenario reports.
inline std::set<std::string> broadcast_check_names() {
  std::set<std::string> names;
  for (const auto& optimizer : {kSgd, kAdam, kAdamW, kRmsprop, kAdagrad}) {
    for (const auto& check : {kOptionsAndSteps, kStateTensors, kParametersEqual, kNextStep}) {
      names.insert(check_name(optimizer, check));
    }
  }
  return names;
}

/// The "api" scenario: each query against the launcher's variable.
struct Query {
  std::string name;
  std::string variable;
  int (*get)();
};
inline std::vector<Query> api_queries() {
  return {{"size()", "WORLD_SIZE", hvd::size},
          {"rank()", "RANK", hvd::rank},
          {"local_rank()", "LOCAL_RANK", hvd::local_rank},
          {"local_size()", "LOCAL_WORLD_SIZE", hvd::local_size}};
}
/// "size() is WORLD_SIZE"
inline std::string query_matches(const Query& query) {
  return query.name + " is " + query.variable;
}
inline const std::string kInitAgain = "init() again returns the same group";
inline const std::string kGroupWorks = "the group works";

/// The names the "api" scenario reports.
inline std::set<std::string> api_check_names() {
  std::set<std::string> names{kInitAgain, kGroupWorks};
  for (const auto& query : api_queries()) names.insert(query_matches(query));
  return names;
}

/// The "join" scenario: uneven inputs under ddp::Join.
inline const std::string kJoin = "Join, batches 3/5/8";
inline const std::string kJoinParameters = "parameters match one process";
inline const std::string kLastToJoin = "join() names rank 2, the last to join";

/// The names the "join" scenario reports.
inline std::set<std::string> join_check_names() {
  return {check_name(kJoin, kJoinParameters), check_name(kJoin, kLastToJoin)};
}

}  // namespace hvd_check
}  // namespace ddp::testing

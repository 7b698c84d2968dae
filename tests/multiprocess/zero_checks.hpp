#pragma once

// ZeroRedundancyOptimizer on each rank of a group of 1 to 4 processes, run
// by ddp_test_worker ("zero"): stage 1 beside DistributedDataParallel and
// stage 2 on the bare model, with SGD with momentum, Adam and AdamW, against
// plain DistributedDataParallel with the same optimizer, in one bucket and
// two; the state each rank holds; stage 2's accumulation over two passes,
// its reduce-scatters overlapping backward (counted), the gradients it
// releases and the misuse it names. Each check is reported by name, each
// name written once, below; the parent test expects zero_check_names().

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/named_checks.hpp"
#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::testing {

/// Runs every ZeRO case; prints each check by name and returns how many
/// failed.
int check_zero(const std::shared_ptr<ProcessGroup>& group);

/// The names of check_zero()'s checks.
namespace zero_check {
/// The stages each optimizer case runs at.
inline std::vector<int> stages() { return {1, 2}; }
/// The optimizers.
inline const std::string kSgdMomentum = "SGD with momentum";
inline const std::string kAdam = "Adam";
inline const std::string kAdamW = "AdamW";
/// An optimizer case with the parameters in two buckets.
inline std::string in_two_buckets(const std::string& optimizer) {
  return optimizer + ", 2 buckets";
}
/// Each stage's optimizer cases: every optimizer, and Adam in two buckets.
inline std::vector<std::string> optimizer_cases() {
  return {kSgdMomentum, kAdam, kAdamW, in_two_buckets(kAdam)};
}
/// The subject of an optimizer case's checks at `stage`.
inline std::string at_stage(int stage, const std::string& optimizer_case) {
  return "stage " + std::to_string(stage) + ", " + optimizer_case;
}
/// What each optimizer case checks.
inline const std::string kParameters = "parameters equal plain DDP's after 5 steps (1e-6)";
inline const std::string kBuckets = "the buckets are as the cap makes them";
inline const std::string kShardState = "the state held is that of this rank's shard";
inline const std::string kShardsCover = "the shards cover every parameter element once";
inline const std::string kSpareLeftAlone = "the parameter that never gets a gradient is left alone";
inline std::vector<std::string> optimizer_case_checks() {
  return {kParameters, kBuckets, kShardState, kShardsCover, kSpareLeftAlone};
}

/// Stage 2 with two backward passes per step.
inline const std::string kTwoPasses = "stage 2, 2 passes per step";
inline const std::string kFirstPassKept = "the first pass's gradients stay in .grad";
inline const std::string kTwoPassesParameters =
    "parameters equal plain DDP's with no_sync() after 5 steps (1e-6)";
/// Stage 2's collectives, counted.
inline const std::string kOverlap = "stage 2 overlaps backward";
inline const std::string kThreeBuckets = "three buckets of 68, 272 and 144 elements";
inline const std::string kEarlyReduceScatters =
    "2 reduce-scatters issued before the first layer's gradient";
inline const std::string kReleasedAfterBackward =
    "all 3 issued and every .grad released when backward returns";
inline const std::string kStepCollectives =
    "step() issues the usage all-reduce (none alone) and 3 all-gathers";
/// Misuse.
inline const std::string kSecondBackward = "stage 2: a second backward before step() is refused";
inline const std::string kZeroGradMidway =
    "stage 2: zero_grad() between backward and step() is refused";
inline const std::string kBadOptions =
    "a cap of 0 and 2 passes at stage 1 are refused naming the option";
inline const std::string kNoFullGradientKept = "stage 2: no full gradient is kept after step()";
inline const std::string kBadStage = "stage 3 is a ConfigError naming the stages";
}  // namespace zero_check

/// The names check_zero() reports on every rank.
inline std::set<std::string> zero_check_names() {
  using namespace zero_check;  // NOLINT(google-build-using-namespace)
  std::set<std::string> names{check_name(kTwoPasses, kFirstPassKept),
                              check_name(kTwoPasses, kTwoPassesParameters),
                              check_name(kOverlap, kThreeBuckets),
                              check_name(kOverlap, kEarlyReduceScatters),
                              check_name(kOverlap, kReleasedAfterBackward),
                              check_name(kOverlap, kStepCollectives),
                              kSecondBackward,
                              kZeroGradMidway,
                              kBadOptions,
                              kNoFullGradientKept,
                              kBadStage};
  for (int stage : stages()) {
    for (const auto& optimizer_case : optimizer_cases()) {
      for (const auto& check : optimizer_case_checks()) {
        names.insert(check_name(at_stage(stage, optimizer_case), check));
      }
    }
  }
  return names;
}

}  // namespace ddp::testing

#pragma once

// Mixed precision and the gradient scaler on each rank of a real process
// group, run by amp_test_worker. Each check is reported by name
// (tests/common/named_checks.hpp), each name written once, below, for the
// checks and the parent test (amp_multiprocess_test.cpp) alike.

#include <memory>
#include <set>
#include <string>

#include "common/named_checks.hpp"
#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::testing {

/// An inf or NaN injected into the last rank's gradient: with the scaler's
/// group every rank skips the step, keeps its parameters and halves the
/// scale; growth after exactly growth_interval clean steps; without the
/// group only the overflowing rank skips.
int check_scaler_overflow(const std::shared_ptr<ProcessGroup>& group);

/// Opt levels under DistributedDataParallel: O1 against one process on the
/// whole batch; the tutorial ConvNet with SyncBatchNorm at O1 with a
/// scaler; O2 (masters aligned across ranks, an overflow on one rank
/// skipped by all); O3. Replicas stay bit-identical.
int check_amp_with_ddp(const std::shared_ptr<ProcessGroup>& group);

/// The names of check_scaler_overflow()'s checks.
namespace scaler_check {
/// What is injected into the last rank's gradient, and what that checks.
inline const std::string kInf = "inf";
inline const std::string kNaN = "NaN";
inline std::string on_the_last_rank(const std::string& bad_value) {
  return bad_value + " on the last rank";
}
inline const std::string kSkippedEverywhere = "step skipped on every rank";
inline const std::string kParametersUnchanged = "parameters unchanged";
inline const std::string kScaleHalved = "scale halved";
/// The clean steps after them (the scaler's growth interval), and what
/// each checks.
constexpr int kCleanSteps = 3;
inline std::string clean_step(int step) { return "clean step " + std::to_string(step); }
inline const std::string kUnscaledGradients = "steps with unscaled gradients";
inline const std::string kScaleAndTracker = "scale and growth tracker";
/// With several ranks.
inline const std::string kAloneOnlyCulpritSkips =
    "without the group only the overflowing rank skips";
}  // namespace scaler_check

/// The names check_scaler_overflow() reports on every rank of `world`.
inline std::set<std::string> scaler_check_names(int world) {
  using namespace scaler_check;  // NOLINT(google-build-using-namespace)
  std::set<std::string> names;
  for (const auto& bad_value : {kInf, kNaN}) {
    for (const auto& check : {kSkippedEverywhere, kParametersUnchanged, kScaleHalved}) {
      names.insert(check_name(on_the_last_rank(bad_value), check));
    }
  }
  for (int step = 1; step <= kCleanSteps; ++step) {
    names.insert(check_name(clean_step(step), kUnscaledGradients));
    names.insert(check_name(clean_step(step), kScaleAndTracker));
  }
  if (world > 1) names.insert(kAloneOnlyCulpritSkips);
  return names;
}

/// The names of check_amp_with_ddp()'s checks.
namespace amp_ddp_check {
inline const std::string kO1Mlp = "O1 under DDP matches one process within 1e-3";
inline const std::string kO1Replicas = "O1 replicas are identical";
/// The tutorial's ConvNet with SyncBatchNorm at O1, and what it checks.
inline const std::string kO1ConvNet = "O1 ConvNet with SyncBatchNorm";
inline const std::string kReplicas = "replicas (parameters, statistics) identical";
inline const std::string kNoOverflow = "no overflow with bfloat16, scale kept";
inline const std::string kFirstOutput = "first step's output within 1e-2 of one process's";
inline const std::string kO1ConvNetMatches = kO1ConvNet + " matches one process within 1e-2";
inline const std::string kO1ReferenceLearns = "O1 ConvNet reference loss decreases";
/// O2 and O3, and what each checks.
inline const std::string kO2 = "O2";
inline const std::string kInfSkippedEverywhere =
    "an inf on the last rank skips the step on every rank";
inline const std::string kScaleHalvesEverywhere = "the scale halves on every rank";
inline const std::string kMastersEverywhere = "float32 masters identical on every rank";
inline const std::string kParametersEverywhere = "model parameters identical on every rank";
inline const std::string kRoundedMasters = "the model holds the rounded masters";
inline const std::string kO3 = "O3";
inline const std::string kBFloat16Parameters = "every parameter bfloat16";
inline const std::string kReplicasIdentical = "replicas identical";
}  // namespace amp_ddp_check

/// The names check_amp_with_ddp() reports on every rank.
inline std::set<std::string> amp_with_ddp_check_names() {
  using namespace amp_ddp_check;  // NOLINT(google-build-using-namespace)
  return {kO1Mlp,
          kO1Replicas,
          check_name(kO1ConvNet, kReplicas),
          check_name(kO1ConvNet, kNoOverflow),
          check_name(kO1ConvNet, kFirstOutput),
          kO1ConvNetMatches,
          kO1ReferenceLearns,
          check_name(kO2, kInfSkippedEverywhere),
          check_name(kO2, kScaleHalvesEverywhere),
          check_name(kO2, kMastersEverywhere),
          check_name(kO2, kParametersEverywhere),
          check_name(kO2, kRoundedMasters),
          check_name(kO3, kBFloat16Parameters),
          check_name(kO3, kReplicasIdentical)};
}

}  // namespace ddp::testing

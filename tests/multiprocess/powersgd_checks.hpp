#pragma once

// The PowerSGD comm hook (ddp/parallel/powersgd_hook.hpp) on each rank of a
// 2-process group, run by ddp_test_worker ("powersgd"): buckets of known
// gradients reduced by the hook against their average, the error-feedback
// invariant, what is compressed and how much is sent, warm start, the
// options' validation, and DistributedDataParallel training with the hook
// at full rank against one process. Each check is reported by name, each
// name written once, below; the parent test expects power_sgd_check_names().

#include <memory>
#include <set>
#include <string>

#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::testing {

/// Runs every PowerSGD case; prints each check by name and returns how many
/// failed. Needs a group of 2 ranks.
int check_power_sgd(const std::shared_ptr<ProcessGroup>& group);

/// The names of check_power_sgd()'s checks.
namespace powersgd_check {
inline const std::string kPlainBeforeStart =
    "the start_iteration iterations before compression are plain averages";
inline const std::string kFullRankEqualsAverage =
    "at full rank, compressed gradients equal the average";
inline const std::string kFullRankSent =
    "at full rank, each iteration sends the vector plus both factors (127 elements)";
inline const std::string kErrorFeedbackSum =
    "error feedback: the updates applied plus the ranks' mean error equal the sum of the mean "
    "gradients";
inline const std::string kErrorFeedbackLossy =
    "error feedback: at rank 1 the updates differ from the mean gradients";
inline const std::string kRate2SmallExact =
    "rate 2, rank 2: the 4x4 matrix and the vector are averaged exactly";
inline const std::string kRate2LargeCompressed = "rate 2, rank 2: the 64x64 matrix is compressed";
inline const std::string kRate2Sent =
    "rate 2, rank 2: each iteration sends 16 + 64 + 2 x 128 elements";
inline const std::string kWarmStart =
    "warm start: a fixed gradient's approximation reaches the best rank-1 approximation";
inline const std::string kColdStart = "without warm start: each iteration draws a new factor";
inline const std::string kValidation =
    "start_iteration below 2 with error feedback is a ConfigError naming it";
inline const std::string kDdp =
    "DistributedDataParallel with PowerSGD at full rank matches one process";
}  // namespace powersgd_check

/// The names check_power_sgd() reports on every rank.
inline std::set<std::string> power_sgd_check_names() {
  using namespace powersgd_check;  // NOLINT(google-build-using-namespace)
  return {kPlainBeforeStart,
          kFullRankEqualsAverage,
          kFullRankSent,
          kErrorFeedbackSum,
          kErrorFeedbackLossy,
          kRate2SmallExact,
          kRate2LargeCompressed,
          kRate2Sent,
          kWarmStart,
          kColdStart,
          kValidation,
          kDdp};
}

}  // namespace ddp::testing

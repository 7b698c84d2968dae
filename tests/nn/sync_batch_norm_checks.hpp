#pragma once

// SyncBatchNorm against one-process BatchNorm on the concatenated batch,
// run on each rank of a real process group by sync_batch_norm_test_worker.
// Each check is reported by name (tests/common/named_checks.hpp); the plan
// and the names below drive the checks and the parent test's expected names
// (sync_batch_norm_test.cpp) alike.

#include <torch/torch.h>

#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/named_checks.hpp"
#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::testing {

/// Every input rank (2-5), equal and unequal batch sizes, momentum and
/// cumulative average, without affine or running statistics: outputs,
/// input gradients, weight and bias gradients (summed over ranks), running
/// statistics, eval mode without communication; one sample per rank; a
/// trained ConvNet converted, and trained under DDP. Returns how many checks
/// failed.
int check_sync_batch_norm(const std::shared_ptr<ProcessGroup>& group);

/// The plan of check_sync_batch_norm() and the names of its checks.
namespace sync_batch_norm_check {

/// How many rows each rank's batch holds.
enum class Rows {
  kEqual,    // 4 on every rank
  kUnequal,  // 3 + 2r on rank r (at least 3: with 2 values per channel the
             // input gradient is zero up to eps, and relative errors of
             // rounding noise mean nothing)
  kOne,      // 1 on every rank
};

/// One layer case: the input's shape after (N, C), the rows, the options.
struct LayerCase {
  std::string name;
  std::vector<int64_t> spatial;
  Rows rows;
  torch::nn::BatchNormOptions options;
};

/// The layer cases, each trained kSteps steps, then evaluated.
inline std::vector<LayerCase> layer_cases() {
  using torch::nn::BatchNormOptions;
  return {
      {"(N,C) equal batches", {}, Rows::kEqual, BatchNormOptions(5)},
      {"(N,C) unequal batches", {}, Rows::kUnequal, BatchNormOptions(5)},
      {"(N,C,L) unequal batches, momentum 0.3",
       {7},
       Rows::kUnequal,
       BatchNormOptions(4).momentum(0.3)},
      {"(N,C,H,W) equal batches", {5, 6}, Rows::kEqual, BatchNormOptions(3)},
      {"(N,C,H,W) unequal batches, cumulative average",
       {4, 3},
       Rows::kUnequal,
       BatchNormOptions(3).momentum(c10::nullopt)},
      {"(N,C,D,H,W) unequal batches", {3, 4, 2}, Rows::kUnequal, BatchNormOptions(2)},
      {"(N,C,H,W) no affine", {3, 3}, Rows::kUnequal, BatchNormOptions(3).affine(false)},
      {"(N,C,L) no running statistics",
       {5},
       Rows::kUnequal,
       BatchNormOptions(2).track_running_stats(false)},
  };
}

/// One sample per rank: fine in any group (a rank adds L values per
/// channel); with one rank, an error besides (kSingleValue).
inline LayerCase one_sample_per_rank() {
  return {"one (N=1, C, L) sample per rank", {4}, Rows::kOne, torch::nn::BatchNormOptions(3)};
}
inline const std::string kSingleValue = "a single value per channel over all ranks is an error";

/// The training steps of each layer case, and the subject of each step's
/// checks.
constexpr int kSteps = 3;
inline std::string at_step(const LayerCase& c, int step) {
  return c.name + " step " + std::to_string(step);
}
/// What each step checks; the parameters' gradients only with affine.
inline const std::string kOutput = "output";
inline const std::string kInputGradient = "input gradient";
inline const std::string kWeightGradient = "weight gradient summed over ranks";
inline const std::string kBiasGradient = "bias gradient summed over ranks";
/// What each layer case checks after training: the running statistics
/// where it tracks them, then the output in eval mode.
inline const std::string kRunningMean = "running mean";
inline const std::string kRunningVariance = "running variance";
inline const std::string kBatchesTracked = "num_batches_tracked";
inline const std::string kEvalOutput = "eval output";

/// Every name layer case `c` reports.
inline std::vector<std::string> layer_case_checks(const LayerCase& c) {
  std::vector<std::string> names;
  for (int step = 0; step < kSteps; ++step) {
    names.push_back(check_name(at_step(c, step), kOutput));
    names.push_back(check_name(at_step(c, step), kInputGradient));
    if (c.options.affine()) {
      names.push_back(check_name(at_step(c, step), kWeightGradient));
      names.push_back(check_name(at_step(c, step), kBiasGradient));
    }
  }
  if (c.options.track_running_stats()) {
    for (const auto& check : {kRunningMean, kRunningVariance, kBatchesTracked}) {
      names.push_back(check_name(c.name, check));
    }
  }
  names.push_back(check_name(c.name, kEvalOutput));
  return names;
}

/// A trained ConvNet converted, then trained under DDP.
inline const std::string kSameRoot = "converting a ConvNet returns the same root";
inline const std::string kSameTensors =
    "converted ConvNet keeps its trained parameters and buffers (the same tensors)";
inline const std::string kConverted =
    "BatchNorm2d became ddp::nn::SyncBatchNorm inside the Sequentials";
inline const std::string kSameEvalOutput = "converted ConvNet in eval mode gives the same output";
inline const std::string kTrainsAsOneProcess =
    "SyncBatchNorm ConvNet under DDP trains as one process on the whole batch";
inline const std::string kRunningStatistics = "its running statistics equal the whole batch's";

}  // namespace sync_batch_norm_check

/// The names check_sync_batch_norm() reports on every rank of a group of
/// `world`.
inline std::set<std::string> sync_batch_norm_check_names(int world) {
  using namespace sync_batch_norm_check;  // NOLINT(google-build-using-namespace)
  std::set<std::string> names{kSameRoot,       kSameTensors,        kConverted,
                              kSameEvalOutput, kTrainsAsOneProcess, kRunningStatistics};
  std::vector<LayerCase> cases = layer_cases();
  cases.push_back(one_sample_per_rank());
  for (const auto& c : cases) {
    for (const auto& name : layer_case_checks(c)) names.insert(name);
  }
  if (world == 1) names.insert(kSingleValue);
  return names;
}

}  // namespace ddp::testing

// The gradient scaler and the opt levels with N real processes
// (amp_checks.cpp runs on every rank).

#include <gtest/gtest.h>

#include <set>
#include <string>

#include "common/expect_checks.hpp"
#include "multiprocess/harness.hpp"

namespace ddp::testing {
namespace {

// inf and NaN on the last rank, 3 clean steps, and with several ranks the
// scaler without a group (amp_checks.cpp, scalerOverflow).
std::set<std::string> scalerChecks(int world) {
  std::set<std::string> names;
  for (const char* kind : {"inf", "NaN"}) {
    for (const char* check :
         {": step skipped on every rank", ": parameters unchanged", ": scale halved"}) {
      names.insert(std::string(kind) + " on the last rank" + check);
    }
  }
  for (int step = 1; step <= 3; ++step) {
    names.insert("clean step " + std::to_string(step) + " steps with unscaled gradients");
    names.insert("clean step " + std::to_string(step) + ": scale and growth tracker");
  }
  if (world > 1) names.insert("without the group only the overflowing rank skips");
  return names;
}

class AmpScalerRanks : public ::testing::TestWithParam<int> {};

TEST_P(AmpScalerRanks, OverflowOnOneRankSkipsTheStepEverywhereAndHalvesTheScale) {
  const int world = GetParam();
  expectChecks(runRanks(world, {"scaler-overflow"}), scalerChecks(world));
}

INSTANTIATE_TEST_SUITE_P(AmpGradScaler, AmpScalerRanks, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

TEST(AmpDistributed, OptLevelsUnderDistributedDataParallelOnTwoRanks) {
  const std::set<std::string> expected{
      "O1 under DDP matches one process within 1e-3",
      "O1 replicas are identical",
      "O1 ConvNet with SyncBatchNorm: replicas (parameters, statistics) identical",
      "O1 ConvNet with SyncBatchNorm: no overflow with bfloat16, scale kept",
      "O1 ConvNet with SyncBatchNorm matches one process within 1e-2",
      "O1 ConvNet with SyncBatchNorm: first step's output within 1e-2 of one process's",
      "O1 ConvNet reference loss decreases",
      "O2: an inf on the last rank skips the step on every rank",
      "O2: the scale halves on every rank",
      "O2: float32 masters identical on every rank",
      "O2: model parameters identical on every rank",
      "O2: the model holds the rounded masters",
      "O3: every parameter bfloat16",
      "O3: replicas identical"};
  expectChecks(runRanks(2, {"amp-ddp"}, torchrunEnvironment, std::chrono::seconds(150)), expected);
}

}  // namespace
}  // namespace ddp::testing

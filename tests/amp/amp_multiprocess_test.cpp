// The gradient scaler and the opt levels with N real processes
// (amp_checks.cpp runs on every rank).

#include <gtest/gtest.h>

#include <string>

#include "multiprocess/harness.hpp"

namespace ddp::testing {
namespace {

void expectAllPassed(const std::vector<launch::ChildResult>& results, int expected) {
  for (size_t rank = 0; rank < results.size(); ++rank) {
    EXPECT_EQ(results[rank].exit_code, 0) << describe(results);
    EXPECT_NE(results[rank].output.find("rank " + std::to_string(rank) + ": " +
                                        std::to_string(expected) + " checks passed, 0 failed"),
              std::string::npos)
        << describe(results);
  }
}

class AmpScalerRanks : public ::testing::TestWithParam<int> {};

TEST_P(AmpScalerRanks, OverflowOnOneRankSkipsTheStepEverywhereAndHalvesTheScale) {
  const int world = GetParam();
  // inf and NaN (3 checks each), 3 clean steps (2 each), and with several
  // ranks the scaler without a group.
  expectAllPassed(runRanks(world, {"scaler-overflow"}), 6 + 6 + (world > 1 ? 1 : 0));
}

INSTANTIATE_TEST_SUITE_P(AmpGradScaler, AmpScalerRanks, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

TEST(AmpDistributed, OptLevelsUnderDistributedDataParallelOnTwoRanks) {
  // O1 MLP (2), O1 ConvNet with SyncBatchNorm (5), O2 (5), O3 (2).
  expectAllPassed(runRanks(2, {"amp-ddp"}, torchrunEnvironment, std::chrono::seconds(150)), 14);
}

}  // namespace
}  // namespace ddp::testing

// The gradient scaler and the opt levels with N real processes
// (amp_checks.cpp runs on every rank).

#include <gtest/gtest.h>

#include <string>

#include "amp/amp_checks.hpp"
#include "common/expect_checks.hpp"
#include "multiprocess/harness.hpp"

namespace ddp::testing {
namespace {

class AmpScalerRanks : public ::testing::TestWithParam<int> {};

TEST_P(AmpScalerRanks, OverflowOnOneRankSkipsTheStepEverywhereAndHalvesTheScale) {
  const int world = GetParam();
  expectChecks(runRanks(world, {"scaler-overflow"}), scalerCheckNames(world));
}

INSTANTIATE_TEST_SUITE_P(AmpGradScaler, AmpScalerRanks, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

TEST(AmpDistributed, OptLevelsUnderDistributedDataParallelOnTwoRanks) {
  expectChecks(runRanks(2, {"amp-ddp"}, torchrunEnvironment, std::chrono::seconds(150)),
               ampWithDdpCheckNames());
}

}  // namespace
}  // namespace ddp::testing

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
  expect_checks(run_ranks(world, {"scaler-overflow"}), scaler_check_names(world));
}

INSTANTIATE_TEST_SUITE_P(AmpGradScaler, AmpScalerRanks, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

TEST(AmpDistributed, OptLevelsUnderDistributedDataParallelOnTwoRanks) {
  expect_checks(run_ranks(2, {"amp-ddp"}, torchrun_environment, std::chrono::seconds(150)),
                amp_with_ddp_check_names());
}

}  // namespace
}  // namespace ddp::testing

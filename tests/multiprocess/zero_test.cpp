// ZeroRedundancyOptimizer with N = 1, 2, 3 and 4 real processes: stages 1
// and 2 with SGD with momentum, Adam and AdamW equal plain
// DistributedDataParallel with the same optimizer
// (tests/multiprocess/zero_checks.cpp).

#include <gtest/gtest.h>

#include "common/expect_checks.hpp"
#include "multiprocess/harness.hpp"
#include "multiprocess/zero_checks.hpp"

namespace ddp::testing {
namespace {

class DdpZero : public ::testing::TestWithParam<int> {};

TEST_P(DdpZero, ShardedOptimizerMatchesPlainDdp) {
  auto results =
      runRanks(GetParam(), {"zero", "--backend", "gloo", "--collective-timeout-ms", "60000"});
  for (const auto& r : results) EXPECT_FALSE(r.killed_at_deadline) << describe(results);
  expectChecks(results, zeroCheckNames());
}

INSTANTIATE_TEST_SUITE_P(Ddp, DdpZero, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

}  // namespace
}  // namespace ddp::testing

// The PowerSGD comm hook with 2 real processes: exact at full rank, the
// error-feedback invariant, what is compressed and sent, warm start, and
// DistributedDataParallel training against one process
// (tests/multiprocess/powersgd_checks.cpp). Its accuracy on Fashion-MNIST
// is tested with the examples (tests/examples).

#include <gtest/gtest.h>

#include "common/expect_checks.hpp"
#include "multiprocess/harness.hpp"
#include "multiprocess/powersgd_checks.hpp"

namespace ddp::testing {
namespace {

TEST(DdpPowerSgd, ReducesToTheAverageAtFullRankAndKeepsWhatItLeavesOut) {
  auto results =
      run_ranks(2, {"powersgd", "--backend", "gloo", "--collective-timeout-ms", "60000"});
  for (const auto& r : results) EXPECT_FALSE(r.killed_at_deadline) << describe(results);
  expect_checks(results, power_sgd_check_names());
}

}  // namespace
}  // namespace ddp::testing

// Uneven inputs: ddp::Join with 3 real processes that run 3, 5 and 8
// iterations (and other mixes) end without a hang and equal one process
// applying the gradients of the ranks that ran (tests/multiprocess/
// join_checks.cpp).

#include <gtest/gtest.h>

#include "common/expect_checks.hpp"
#include "multiprocess/harness.hpp"
#include "multiprocess/join_checks.hpp"

namespace ddp::testing {
namespace {

TEST(DdpJoin, UnevenInputsMatchOneProcessAndEndTogether) {
  auto results = run_ranks(3, {"join", "--backend", "gloo", "--collective-timeout-ms", "60000"});
  for (const auto& r : results) EXPECT_FALSE(r.killed_at_deadline) << describe(results);
  expect_checks(results, join_check_names());
}

}  // namespace
}  // namespace ddp::testing

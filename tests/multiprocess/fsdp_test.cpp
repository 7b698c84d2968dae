// FullyShardedDataParallel with N = 1, 2, 3 and 4 real processes: training
// equals one process on the concatenated batch (tests/multiprocess/
// fsdp_checks.cpp), with shards of 1/N and nothing gathered between steps.

#include <gtest/gtest.h>

#include "common/expect_checks.hpp"
#include "multiprocess/fsdp_checks.hpp"
#include "multiprocess/harness.hpp"

namespace ddp::testing {
namespace {

class FsdpTraining : public ::testing::TestWithParam<int> {};

TEST_P(FsdpTraining, MatchesSingleProcessTraining) {
  auto results = run_ranks(GetParam(), {"fsdp", "--backend", "gloo"});
  expect_checks_per_rank(results, [](int) { return fsdp_check_names(); });
}

INSTANTIATE_TEST_SUITE_P(Fsdp, FsdpTraining, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

// The shared-memory backend's all-gather and reduce-scatter.
class FsdpOnShm : public ::testing::TestWithParam<int> {};

TEST_P(FsdpOnShm, MatchesSingleProcessTraining) {
  auto results = run_ranks(GetParam(), {"fsdp", "--backend", "shm"});
  expect_checks_per_rank(results, [](int) { return fsdp_check_names(); });
}

INSTANTIATE_TEST_SUITE_P(Fsdp, FsdpOnShm, ::testing::Values(2, 3),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

}  // namespace
}  // namespace ddp::testing

// DistributedDataParallel with N = 1, 2, 3 and 4 real processes: training
// equals one process on the concatenated batch (tests/multiprocess/
// ddp_checks.cpp), and misuse fails cleanly on every rank.

#include <gtest/gtest.h>

#include "common/expect_checks.hpp"
#include "ddp/base/errors.hpp"
#include "multiprocess/any_module_checks.hpp"
#include "multiprocess/checkpoint_checks.hpp"
#include "multiprocess/ddp_checks.hpp"
#include "multiprocess/harness.hpp"

namespace ddp::testing {
namespace {

class DdpTraining : public ::testing::TestWithParam<int> {};

TEST_P(DdpTraining, MatchesSingleProcessTraining) {
  const int world = GetParam();
  auto results = run_ranks(world, {"ddp", "--backend", "gloo"});
  // The ConvNet's buffers are checked one way on rank 0, another on the others.
  expect_checks_per_rank(results, ddp_check_names);
}

INSTANTIATE_TEST_SUITE_P(Ddp, DdpTraining, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

// Sequential models, a tuple and a struct as outputs (any_module_checks.hpp).
class DdpAnyModule : public ::testing::TestWithParam<int> {};

TEST_P(DdpAnyModule, MatchesSingleProcessTraining) {
  auto results = run_ranks(GetParam(), {"ddp-any-module", "--backend", "gloo"});
  expect_checks_per_rank(results, [](int) { return any_module_check_names(); });
}

INSTANTIATE_TEST_SUITE_P(Ddp, DdpAnyModule, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

// Blocks run through ddp::nn::checkpoint inside DDP, against the same
// without it (checkpoint_checks.hpp).
TEST(DdpCheckpoint, CheckpointedBlocksTrainAsWithoutCheckpointingBitForBitOnTwoRanks) {
  auto results = run_ranks(2, {"checkpoint", "--backend", "gloo"});
  expect_checks_per_rank(results, [](int) { return checkpoint_check_names(); });
}

TEST(DdpStartup, MismatchedModelFailsOnEveryRankNamingTheParameter) {
  auto results = run_ranks(3, {"ddp-mismatch"});
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, static_cast<int>(ExitCode::kInvalidArgument)) << describe(results);
    EXPECT_NE(r.output.find("the parameters differ across ranks at #0: rank 0 has "
                            "'fc1.weight float32 [16, 8]', rank 2 has 'fc1.weight float32 [17, 8]' "
                            "(ranks that differ from rank 0: 2; ranks that agree: 0, 1"),
              std::string::npos)
        << describe(results);
  }
}

TEST(DdpStartup, UnusedParameterWithoutOptionIsAnErrorNamingIt) {
  auto results = run_ranks(2, {"ddp-unused", "--collective-timeout-ms", "20000"});
  for (const auto& r : results) {
    EXPECT_FALSE(r.killed_at_deadline) << describe(results);
    EXPECT_EQ(r.exit_code, static_cast<int>(ExitCode::kInvalidArgument)) << describe(results);
    EXPECT_NE(r.output.find("parameter 'branch.weight' received no gradient in this backward "
                            "pass (2 parameter(s) in all: 'branch.weight', 'branch.bias')"),
              std::string::npos)
        << describe(results);
    EXPECT_NE(r.output.find("find_unused_parameters(true)"), std::string::npos);
  }
}

}  // namespace
}  // namespace ddp::testing

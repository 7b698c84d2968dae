// ZeroRedundancyOptimizer with N = 1, 2, 3 and 4 real processes: stages 1
// and 2 with SGD with momentum, Adam and AdamW equal plain
// DistributedDataParallel with the same optimizer
// (tests/multiprocess/zero_checks.cpp); snapshots of the shards resumed at
// another world size.

#include <gtest/gtest.h>

#include <string>

#include "common/expect_checks.hpp"
#include "common/temporary_directory.hpp"
#include "multiprocess/harness.hpp"
#include "multiprocess/zero_checks.hpp"
#include "multiprocess/zero_snapshot_checks.hpp"

namespace ddp::testing {
namespace {

class DdpZero : public ::testing::TestWithParam<int> {};

TEST_P(DdpZero, ShardedOptimizerMatchesPlainDdp) {
  auto results =
      run_ranks(GetParam(), {"zero", "--backend", "gloo", "--collective-timeout-ms", "60000"});
  for (const auto& r : results) EXPECT_FALSE(r.killed_at_deadline) << describe(results);
  expect_checks(results, zero_check_names());
}

INSTANTIATE_TEST_SUITE_P(Ddp, DdpZero, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

// Saved on 2 ranks, each writing its shard; resumed on 1 and on 3, each
// cutting its new shard out of the saved ones (zero_snapshot_checks.cpp).
TEST(DdpZeroSnapshot, ResumesAtAnotherWorldSize) {
  const TemporaryDirectory snapshots("ddp-zero-snapshot-");
  const std::string directory = snapshots.string();
  auto run = [&](int world, const std::string& phase) {
    auto results = run_ranks(world, {"zero-snapshot", "--phase", phase, "--directory", directory,
                                     "--backend", "gloo", "--collective-timeout-ms", "60000"});
    for (const auto& r : results) EXPECT_FALSE(r.killed_at_deadline) << describe(results);
    expect_checks_per_rank(results,
                           [&](int rank) { return zero_snapshot_check_names(phase, rank); });
  };
  run(2, "save");
  run(1, "resume");
  run(3, "resume");
  // The same through PyTorch's Distributed Checkpoint format.
  run(2, "save-dcp");
  run(1, "resume-dcp");
  run(3, "resume-dcp");
}

}  // namespace
}  // namespace ddp::testing

// FullyShardedDataParallel with N = 1, 2, 3 and 4 real processes: training
// equals one process on the concatenated batch (tests/multiprocess/
// fsdp_checks.cpp), with shards of 1/N and nothing gathered between steps.

#include <gtest/gtest.h>

#include <csignal>

#include "common/auto_backend_name.hpp"
#include "common/expect_checks.hpp"
#include "common/temporary_directory.hpp"
#include "multiprocess/checkpoint_checks.hpp"
#include "multiprocess/fsdp_checks.hpp"
#include "multiprocess/fsdp_construction_checks.hpp"
#include "multiprocess/fsdp_generated_checks.hpp"
#include "multiprocess/fsdp_hybrid_checks.hpp"
#include "multiprocess/fsdp_lost_rank_checks.hpp"
#include "multiprocess/fsdp_paths_checks.hpp"
#include "multiprocess/fsdp_snapshot_checks.hpp"
#include "multiprocess/fsdp_transformer_checks.hpp"
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

// A model built under ddp::ShardedConstruction (Note [Sharded
// construction]; fsdp_construction_checks.hpp).
class FsdpShardedConstruction : public ::testing::TestWithParam<int> {};

TEST_P(FsdpShardedConstruction, NeverWholeEqualToThePlainBuildAndMistakesNamed) {
  const int world = GetParam();
  auto results = run_ranks(world, {"fsdp-construction", "--backend", "gloo"});
  expect_checks_per_rank(results, [world](int) { return fsdp_construction_check_names(world); });
}

INSTANTIATE_TEST_SUITE_P(Fsdp, FsdpShardedConstruction, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

// The transformer of examples/common/gpt.hpp built sharded, its blocks
// checkpointed, against one process (fsdp_transformer_checks.hpp).
class FsdpTransformer : public ::testing::TestWithParam<int> {};

TEST_P(FsdpTransformer, BuiltShardedAndCheckpointedMatchesOneProcessInFp32AndBf16) {
  auto results = run_ranks(GetParam(), {"fsdp-transformer", "--backend", "gloo"});
  expect_checks_per_rank(results, [](int) { return fsdp_transformer_check_names(); });
}

INSTANTIATE_TEST_SUITE_P(Fsdp, FsdpTransformer, ::testing::Values(1, 2, 4),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

// Units run through ddp::nn::checkpoint, against the same without it
// (Note [Checkpointed units]; checkpoint_checks.hpp).
class FsdpCheckpoint : public ::testing::TestWithParam<int> {};

TEST_P(FsdpCheckpoint, CheckpointedUnitsTrainAsWithoutCheckpointingBitForBit) {
  auto results = run_ranks(GetParam(), {"fsdp-checkpoint", "--backend", "gloo"});
  expect_checks_per_rank(results, [](int) { return fsdp_checkpoint_check_names(); });
}

INSTANTIATE_TEST_SUITE_P(Fsdp, FsdpCheckpoint, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

// The shared-memory backend's all-gather and reduce-scatter.
class FsdpOnShm : public ::testing::TestWithParam<int> {};

TEST_P(FsdpOnShm, MatchesSingleProcessTraining) {
  auto results = run_ranks(GetParam(), {"fsdp", "--backend", "shm"});
  expect_checks_per_rank(results, [](int) { return fsdp_check_names(); });
}

INSTANTIATE_TEST_SUITE_P(Fsdp, FsdpOnShm, ::testing::Values(2, 3),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

// The hierarchical backend (shm within each node, Gloo between the node
// leaders), which `auto` picks when the ranks span several nodes: 4 ranks
// as 2 nodes of 2, and 3 ranks as nodes of 2 and 1. Each rank says which
// backend ran, so that a layout `auto` maps elsewhere cannot pass unnoticed.
void expect_fsdp_on_hierarchical(const std::vector<launch::ChildResult>& results) {
  expect_checks_per_rank(results, [](int) { return fsdp_check_names(); });
  for (const auto& r : results) {
    EXPECT_NE(r.output.find("backend=" + auto_backend_name("hierarchical(shm,gloo)")),
              std::string::npos)
        << describe(results);
  }
}

TEST(FsdpOnHierarchical, TwoNodesOfTwoMatchSingleProcessTraining) {
  expect_fsdp_on_hierarchical(run_ranks(4, {"fsdp"}, on_nodes(2)));
}

TEST(FsdpOnHierarchical, UnevenNodesMatchSingleProcessTraining) {
  expect_fsdp_on_hierarchical(run_ranks(3, {"fsdp"}, on_uneven_nodes()));
}

// Hybrid sharding (fsdp_checks.cpp, run_hybrid): a DeviceMesh of a row per
// node, 2 nodes of 2 ranks, 2 nodes of 1 (replication alone) and 1 node of
// 2 (sharding alone), against one process.
void expect_hybrid(const std::vector<launch::ChildResult>& results, const std::string& mesh) {
  expect_checks_per_rank(results, [](int) { return fsdp_hybrid_check_names(); });
  for (const auto& r : results) {
    EXPECT_NE(r.output.find("mesh=" + mesh), std::string::npos) << describe(results);
  }
}

TEST(FsdpHybrid, TwoNodesOfTwoMatchOneProcess) {
  expect_hybrid(run_ranks(4, {"fsdp-hybrid"}, on_nodes(2)),
                "2 x 2 (replicate over gloo, shard over shm)");
}

TEST(FsdpHybrid, TwoNodesOfOneMatchOneProcess) {
  expect_hybrid(run_ranks(2, {"fsdp-hybrid"}, on_nodes(2)),
                "2 x 1 (replicate over gloo, shard over shm)");
}

TEST(FsdpHybrid, OneNodeOfTwoMatchesOneProcess) {
  expect_hybrid(run_ranks(2, {"fsdp-hybrid"}), "1 x 2 (replicate over shm, shard over shm)");
}

TEST(FsdpHybrid, UnevenNodesAreAConfigErrorNamingThem) {
  const auto results = run_ranks(3, {"fsdp-hybrid"}, on_uneven_nodes());
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, static_cast<int>(ExitCode::kConfig)) << describe(results);
    EXPECT_NE(r.output.find("are on 2 nodes (node 0: ranks 0-1, node 1: ranks 2-2); a row per "
                            "node needs the same number of consecutive ranks"),
              std::string::npos)
        << describe(results);
  }
}

// The paths next to the tested ones (fsdp_paths_checks.cpp): misuse named,
// an exception in backward, a gradient penalty, skipped and frozen units,
// another forward order; on Gloo at 1, 2 and 3 ranks and on shm at 2.
class FsdpPaths : public ::testing::TestWithParam<std::pair<std::string, int>> {};

TEST_P(FsdpPaths, MatchOneProcessOrAreNamed) {
  const auto [backend, world] = GetParam();
  auto results = run_ranks(world, {"fsdp-paths", "--backend", backend});
  expect_checks_per_rank(results, [](int) { return fsdp_paths_check_names(); });
}

INSTANTIATE_TEST_SUITE_P(Fsdp, FsdpPaths,
                         ::testing::Values(std::make_pair("gloo", 1), std::make_pair("gloo", 2),
                                           std::make_pair("gloo", 3), std::make_pair("shm", 2)),
                         [](const auto& info) {
                           return info.param.first + "N" + std::to_string(info.param.second);
                         });

// Ranks that run different units without find_unused_units: named errors,
// never an abort; the rank left behind learns from its collective's
// failure (a short collective timeout bounds shm's wait).
class FsdpSkippedUnit : public ::testing::TestWithParam<std::string> {};

TEST_P(FsdpSkippedUnit, IsNamedNeverAnAbort) {
  auto results =
      run_ranks(2, {"fsdp-skip", "--backend", GetParam(), "--collective-timeout-ms", "15000"});
  for (const auto& r : results) EXPECT_EQ(r.term_signal, 0) << describe(results);
  expect_checks_per_rank(results, [](int) { return fsdp_skipped_unit_check_names(); });
}

INSTANTIATE_TEST_SUITE_P(Fsdp, FsdpSkippedUnit, ::testing::Values("gloo", "shm"));

// Random models (fsdp_generated_checks.cpp): the suite's seeds, each
// trained on 1-3 ranks over Gloo and 2 over shm against one process, or
// refused at construction by name. scripts/fsdp-soak.sh runs many more.
class FsdpGenerated : public ::testing::TestWithParam<std::pair<std::string, int>> {};

TEST_P(FsdpGenerated, TrainAsOneProcessOrAreRefusedByName) {
  const auto [backend, world] = GetParam();
  auto results = run_ranks(world, {"fsdp-generated", "--backend", backend, "--seeds", "suite"});
  const auto names = fsdp_generated_check_names(fsdp_generated_suite_seeds());
  expect_checks_per_rank(results, [&](int) { return names; });
}

INSTANTIATE_TEST_SUITE_P(Fsdp, FsdpGenerated,
                         ::testing::Values(std::make_pair("gloo", 1), std::make_pair("gloo", 2),
                                           std::make_pair("gloo", 3), std::make_pair("shm", 2)),
                         [](const auto& info) {
                           return info.param.first + "N" + std::to_string(info.param.second);
                         });

// One phase of the fsdp-snapshot scenario (fsdp_snapshot_checks.cpp) on
// `world` ranks, its checks expected on each.
void run_fsdp_snapshot(int world, const std::string& phase, const std::string& directory,
                       const EnvironmentFor& environment_for = torchrun_environment) {
  auto results = run_ranks(world,
                           {"fsdp-snapshot", "--phase", phase, "--directory", directory,
                            "--backend", "gloo", "--collective-timeout-ms", "60000"},
                           environment_for);
  for (const auto& r : results) EXPECT_FALSE(r.killed_at_deadline) << describe(results);
  expect_checks_per_rank(results,
                         [&](int rank) { return fsdp_snapshot_check_names(phase, rank, world); });
}

// Saved on 2 ranks, each writing its shard of the parameters and of the
// optimizer state; resumed on 2 (bit for bit), 1 and 3 (re-sharded)
// (fsdp_snapshot_checks.cpp).
TEST(FsdpSnapshot, ResumesExactlyAndAtAnotherWorldSize) {
  const TemporaryDirectory snapshots("ddp-fsdp-snapshot-");
  const std::string directory = snapshots.string();
  auto run = [&](int world, const std::string& phase) {
    run_fsdp_snapshot(world, phase, directory);
  };
  run(2, "save");
  run(2, "resume");
  run(1, "resume");
  run(3, "resume");
}

// Saved by a model sharded within each of 2 nodes of 2 ranks and
// replicated across them, whose first row alone writes the pieces (Note
// [Replicated shards] in ddp/parallel/sharded_state.hpp); resumed on 2
// nodes of 2 (bit for bit) and of 1, and without a mesh on 3 and 1 ranks.
TEST(FsdpSnapshot, HybridIsWrittenByItsFirstRowAndResumesAtAnotherShape) {
  const TemporaryDirectory snapshots("ddp-fsdp-snapshot-hybrid-");
  const std::string directory = snapshots.string();
  run_fsdp_snapshot(4, "save-hybrid", directory, on_nodes(2));
  run_fsdp_snapshot(4, "resume-hybrid", directory, on_nodes(2));
  run_fsdp_snapshot(2, "resume-hybrid", directory, on_nodes(2));
  run_fsdp_snapshot(3, "resume-from-hybrid", directory);
  run_fsdp_snapshot(1, "resume-from-hybrid", directory);
}

// The same, saved by save_async() while training goes on: each rank's
// shard written on its background thread, agreed through the store; resumed
// bit for bit on 2 ranks and re-sharded on 3.
TEST(FsdpSnapshot, SaveAsyncResumesAsSaveDoes) {
  const TemporaryDirectory snapshots("ddp-fsdp-snapshot-async-");
  const std::string directory = snapshots.string();
  auto run = [&](int world, const std::string& phase) {
    run_fsdp_snapshot(world, phase, directory);
  };
  run(2, "save-async");
  run(2, "resume");
  run(3, "resume");
}

// A rank SIGKILLed while its background thread writes its shard: rank 0's
// wait() names it within the collective timeout (10 s here), no main file
// of the lost snapshot appears, and one rank resumes the snapshot before
// (fsdp_lost_rank_checks.hpp).
TEST(FsdpSnapshot, RankLostDuringSaveAsyncIsNamedInTimeAndThePreviousResumes) {
  const TemporaryDirectory snapshots("ddp-fsdp-lost-rank-");
  auto results =
      run_ranks(2, {"fsdp-lost-rank", "--phase", "save", "--directory", snapshots.string(),
                    "--backend", "gloo", "--collective-timeout-ms", "10000"});
  EXPECT_EQ(results.at(1).term_signal, SIGKILL) << describe(results);
  EXPECT_EQ(results.at(0).exit_code, 0) << describe(results);
  expect_checks_per_rank({results.at(0)}, [](int) { return fsdp_lost_rank_check_names("save"); });
  auto resumed = run_ranks(1, {"fsdp-lost-rank", "--phase", "resume", "--directory",
                               snapshots.string(), "--backend", "gloo"});
  expect_checks_per_rank(resumed, [](int) { return fsdp_lost_rank_check_names("resume"); });
}

}  // namespace
}  // namespace ddp::testing

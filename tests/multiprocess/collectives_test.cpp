// Every collective, for every dtype and op, with N = 1, 2, 3 and 4 real
// processes over Gloo, against closed-form values (tests/multiprocess/
// worker_checks.cpp); and start-up from each launcher's variables.

#include <gtest/gtest.h>

#include "common/expect_checks.hpp"
#include "multiprocess/collective_memory_checks.hpp"
#include "multiprocess/harness.hpp"
#include "multiprocess/worker_checks.hpp"

namespace ddp::testing {
namespace {

class CoreCollectives : public ::testing::TestWithParam<int> {};

TEST_P(CoreCollectives, EveryDtypeAndOpMatchesClosedForm) {
  const int world = GetParam();
  auto results = run_ranks(world, {"collectives", "--backend", "gloo"});
  ASSERT_EQ(results.size(), static_cast<size_t>(world));
  // Per dtype: every all-reduce and reduce-scatter op, one broadcast per
  // root, all-gather, the asynchronous checks; then the barrier.
  expect_checks(results, collective_check_names(world));
}

INSTANTIATE_TEST_SUITE_P(Core, CoreCollectives, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

class CollectiveMemory : public ::testing::TestWithParam<int> {};

TEST_P(CollectiveMemory, GlooHoldsNoFullSizeCopy) {
  const int world = GetParam();
  auto results = run_ranks(world, {"collective-memory", "--backend", "gloo"});
  expect_checks(results, collective_memory_check_names());
}

INSTANTIATE_TEST_SUITE_P(Gloo, CollectiveMemory, ::testing::Values(2, 3, 4),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

void expect_topology(const std::vector<launch::ChildResult>& results, const std::string& source,
                     int world) {
  const int sum_of_ranks = world * (world - 1) / 2;
  for (int rank = 0; rank < world; ++rank) {
    const auto& r = results[rank];
    EXPECT_EQ(r.exit_code, 0) << describe(results);
    EXPECT_NE(
        r.output.find("rank=" + std::to_string(rank) + " world_size=" + std::to_string(world)),
        std::string::npos)
        << describe(results);
    EXPECT_NE(r.output.find("source=" + source), std::string::npos) << describe(results);
    EXPECT_NE(r.output.find("sum of ranks=" + std::to_string(sum_of_ranks)), std::string::npos)
        << describe(results);
  }
}

TEST(CoreLaunchers, StartsFromTorchrunVariables) {
  auto results = run_ranks(3, {"topology"});
  expect_topology(results, "torchrun", 3);
  EXPECT_NE(results[2].output.find("local_rank=2 local_world_size=3 group_rank=0"),
            std::string::npos)
      << describe(results);
}

TEST(CoreLaunchers, StartsFromOpenMpiVariables) {
  auto results = run_ranks(2, {"topology"}, [](int rank, int world, int port) {
    return Environment{{"OMPI_COMM_WORLD_RANK", std::to_string(rank)},
                       {"OMPI_COMM_WORLD_SIZE", std::to_string(world)},
                       {"OMPI_COMM_WORLD_LOCAL_RANK", std::to_string(rank)},
                       {"OMPI_COMM_WORLD_LOCAL_SIZE", std::to_string(world)},
                       {"MASTER_ADDR", "127.0.0.1"},
                       {"MASTER_PORT", std::to_string(port)}};
  });
  expect_topology(results, "Open MPI", 2);
}

TEST(CoreLaunchers, StartsFromSlurmVariables) {
  // Two "nodes" of two tasks each; Slurm's compressed node list names the
  // master, which is this machine's "localhost".
  auto results = run_ranks(4, {"topology"}, [](int rank, int world, int port) {
    return Environment{
        {"SLURM_PROCID", std::to_string(rank)},      {"SLURM_NTASKS", std::to_string(world)},
        {"SLURM_LOCALID", std::to_string(rank % 2)}, {"SLURM_NODEID", std::to_string(rank / 2)},
        {"SLURM_TASKS_PER_NODE", "2(x2)"},           {"SLURM_JOB_NODELIST", "localhost"},
        {"MASTER_PORT", std::to_string(port)}};
  });
  expect_topology(results, "Slurm", 4);
  EXPECT_NE(results[3].output.find("local_rank=1 local_world_size=2 group_rank=1"),
            std::string::npos)
      << describe(results);
  EXPECT_NE(results[3].output.find("master=localhost:"), std::string::npos) << describe(results);
}

}  // namespace
}  // namespace ddp::testing

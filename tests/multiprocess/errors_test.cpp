// Bad input gives a clear error and a distinct exit code, never a hang:
// each case runs real worker processes and checks the exit code, the
// message, and how long the failure took.

#include <gtest/gtest.h>

#include "backends/backends.hpp"
#include "ddp/errors.hpp"
#include "common/port_holder.hpp"
#include "multiprocess/harness.hpp"

namespace ddp::testing {
namespace {

constexpr int kConfig = static_cast<int>(ExitCode::kConfig);
constexpr int kRendezvous = static_cast<int>(ExitCode::kRendezvous);
constexpr int kTimeout = static_cast<int>(ExitCode::kTimeout);
constexpr int kCollective = static_cast<int>(ExitCode::kCollective);
constexpr int kBackendUnavailable = static_cast<int>(ExitCode::kBackendUnavailable);

// Runs one worker with exactly `env` (on top of a clean environment).
launch::ChildResult runOne(const Environment& env, const std::vector<std::string>& args = {"topology"}) {
  auto results = runRanks(1, args, [&](int, int, int) { return env; }, std::chrono::seconds(30));
  return results.at(0);
}

void expectFailure(const launch::ChildResult& r, int exit_code,
                   const std::vector<std::string>& fragments) {
  EXPECT_FALSE(r.killed_at_deadline) << r.output;
  EXPECT_EQ(r.exit_code, exit_code) << r.output;
  for (const auto& fragment : fragments) {
    EXPECT_NE(r.output.find(fragment), std::string::npos)
        << "expected \"" << fragment << "\" in:\n" << r.output;
  }
}

TEST(FoundationErrors, RankNotBelowWorldSize) {
  auto r = runOne({{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
                   {"MASTER_PORT", "29500"}});
  expectFailure(r, kConfig, {"RANK (torchrun) is 2", "ranks run from 0 to 1"});
}

TEST(FoundationErrors, MissingWorldSize) {
  auto r = runOne({{"RANK", "0"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}});
  expectFailure(r, kConfig, {"RANK is set but WORLD_SIZE is missing", "Set WORLD_SIZE"});
}

TEST(FoundationErrors, WorldSizeNotANumber) {
  auto r = runOne({{"RANK", "0"}, {"WORLD_SIZE", "two"}});
  expectFailure(r, kConfig, {"WORLD_SIZE (torchrun) is 'two'", "not a whole number"});
}

TEST(FoundationErrors, MissingMasterAddress) {
  auto r = runOne({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  expectFailure(r, kConfig, {"MASTER_ADDR is not set", "Open MPI", "mpirun -x MASTER_ADDR"});
}

TEST(FoundationErrors, MasterPortOutOfRange) {
  auto r = runOne({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
                   {"MASTER_PORT", "70000"}});
  expectFailure(r, kConfig, {"MASTER_PORT (torchrun) is 70000", "between 1 and 65535"});
}

TEST(FoundationErrors, UnknownBackend) {
  auto r = runOne({}, {"topology", "--backend", "mpi"});
  expectFailure(r, kConfig, {"unknown backend 'mpi'", "'gloo'"});
}

TEST(FoundationErrors, NcclUnavailableWithoutCuda) {
  if (backends::ncclCompiledIn()) GTEST_SKIP() << "this LibTorch has NCCL";
  auto r = runOne({}, {"topology", "--backend", "nccl"});
  expectFailure(r, kBackendUnavailable, {"backend 'nccl' is not available", "'gloo'"});
}

TEST(FoundationErrors, MasterUnreachableFailsAfterRendezvousTimeout) {
  const int port = launch::findFreePort();  // Nothing listens there.
  auto r = runOne({{"RANK", "1"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
                   {"MASTER_PORT", std::to_string(port)}},
                  {"topology", "--rendezvous-timeout-ms", "1500"});
  expectFailure(r, kRendezvous, {"127.0.0.1:" + std::to_string(port), "rendezvous timeout"});
  EXPECT_GE(r.seconds, 1.4);
  EXPECT_LT(r.seconds, 15.0);
}

TEST(FoundationErrors, MasterPortAlreadyInUse) {
  PortHolder holder;
  const int port = holder.port();
  auto r = runOne({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"},
                   {"MASTER_PORT", std::to_string(port)}});
  expectFailure(r, kRendezvous, {"127.0.0.1:" + std::to_string(port), "already in use"});
}

TEST(FoundationErrors, MissingRankNamedAfterRendezvousTimeout) {
  auto results = runRanks(
      2, {"topology", "--rendezvous-timeout-ms", "1500"},
      [](int rank, int world, int port) {
        // Only rank 0 is started: rank 1 of 3 and rank 2 of 3 never come.
        (void)world;
        auto env = torchrunEnvironment(rank, 3, port);
        return env;
      },
      std::chrono::seconds(30));
  // Rank 0 hosts the store; ranks 0 and 1 joined, rank 2 never did.
  expectFailure(results[0], kRendezvous, {"1 of 3 ranks never joined (missing: 2)"});
  EXPECT_GE(results[0].seconds, 1.4);
  EXPECT_LT(results[0].seconds, 15.0);
}

TEST(FoundationErrors, StalledPeerFailsCollectiveAfterTimeout) {
  auto results = runRanks(2, {"stall", "--collective-timeout-ms", "1500", "--stall-ms", "8000"},
                          torchrunEnvironment, std::chrono::seconds(40));
  expectFailure(results[0], kTimeout,
                {"allReduce(sum) of 1024 float32 elements on rank 0 of 2",
                 "did not finish within 1500 ms"});
  EXPECT_LT(results[0].seconds, 7.5) << "rank 0 waited for the stalled peer instead of timing out";
}

TEST(FoundationErrors, PeerExitFailsCollectiveQuickly) {
  auto results = runRanks(2, {"exit-early", "--collective-timeout-ms", "20000"},
                          torchrunEnvironment, std::chrono::seconds(40));
  EXPECT_EQ(results[1].exit_code, 0) << describe(results);
  ASSERT_NE(results[0].exit_code, 0) << describe(results);
  EXPECT_TRUE(results[0].exit_code == kCollective || results[0].exit_code == kTimeout)
      << describe(results);
  EXPECT_NE(results[0].output.find("allReduce(sum) of 1024 float32 elements on rank 0 of 2"),
            std::string::npos)
      << describe(results);
  EXPECT_LT(results[0].seconds, 19.0) << describe(results);
}

}  // namespace
}  // namespace ddp::testing

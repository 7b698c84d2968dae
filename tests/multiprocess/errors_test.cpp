// Bad input gives a clear error and a distinct exit code, never a hang:
// each case runs real worker processes and checks the exit code, the
// message, and how long the failure took.

#include <gtest/gtest.h>

#include "comm/backends/backends.hpp"
#include "common/port_holder.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/launch/port_reservation.hpp"
#include "multiprocess/harness.hpp"

namespace ddp::testing {
namespace {

constexpr int kConfig = static_cast<int>(ExitCode::kConfig);
constexpr int kRendezvous = static_cast<int>(ExitCode::kRendezvous);
constexpr int kTimeout = static_cast<int>(ExitCode::kTimeout);
constexpr int kCollective = static_cast<int>(ExitCode::kCollective);
constexpr int kBackendUnavailable = static_cast<int>(ExitCode::kBackendUnavailable);

// Runs one worker with exactly `env` (on top of a clean environment).
launch::ChildResult run_one(const Environment& env,
                            const std::vector<std::string>& args = {"topology"}) {
  auto results = run_ranks(
      1, args, [&](int, int, int) { return env; }, std::chrono::seconds(30));
  return results.at(0);
}

void expect_failure(const launch::ChildResult& r, int exit_code,
                    const std::vector<std::string>& fragments) {
  EXPECT_FALSE(r.killed_at_deadline) << r.output;
  EXPECT_EQ(r.exit_code, exit_code) << r.output;
  for (const auto& fragment : fragments) {
    EXPECT_NE(r.output.find(fragment), std::string::npos) << "expected \"" << fragment << "\" in:\n"
                                                          << r.output;
  }
}

TEST(CoreErrors, RankNotBelowWorldSize) {
  auto r = run_one(
      {{"RANK", "2"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}});
  expect_failure(r, kConfig, {"RANK (torchrun) is 2", "ranks run from 0 to 1"});
}

TEST(CoreErrors, MissingWorldSize) {
  auto r = run_one({{"RANK", "0"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "29500"}});
  expect_failure(r, kConfig, {"RANK is set but WORLD_SIZE is missing", "Set WORLD_SIZE"});
}

TEST(CoreErrors, WorldSizeNotANumber) {
  auto r = run_one({{"RANK", "0"}, {"WORLD_SIZE", "two"}});
  expect_failure(r, kConfig, {"WORLD_SIZE (torchrun) is 'two'", "not a whole number"});
}

TEST(CoreErrors, MissingMasterAddress) {
  auto r = run_one({{"OMPI_COMM_WORLD_RANK", "0"}, {"OMPI_COMM_WORLD_SIZE", "2"}});
  expect_failure(r, kConfig, {"MASTER_ADDR is not set", "Open MPI", "mpirun -x MASTER_ADDR"});
}

TEST(CoreErrors, MasterPortOutOfRange) {
  auto r = run_one(
      {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "70000"}});
  expect_failure(r, kConfig, {"MASTER_PORT (torchrun) is 70000", "between 1 and 65535"});
}

TEST(CoreErrors, UnknownBackend) {
  auto r = run_one({}, {"topology", "--backend", "mpi"});
  expect_failure(r, kConfig, {"unknown backend 'mpi'", "'gloo'"});
}

TEST(CoreErrors, NcclUnavailableWithoutCuda) {
  if (backends::nccl_compiled_in()) GTEST_SKIP() << "this LibTorch has NCCL";
  auto r = run_one({}, {"topology", "--backend", "nccl"});
  expect_failure(r, kBackendUnavailable, {"backend 'nccl' is not available", "'gloo'"});
}

TEST(CoreErrors, MasterUnreachableFailsAfterRendezvousTimeout) {
  const launch::PortReservation reserved;  // Held, so nothing listens there.
  const int port = reserved.port();
  auto r = run_one({{"RANK", "1"},
                    {"WORLD_SIZE", "2"},
                    {"MASTER_ADDR", "127.0.0.1"},
                    {"MASTER_PORT", std::to_string(port)}},
                   {"topology", "--rendezvous-timeout-ms", "1500"});
  expect_failure(r, kRendezvous, {"127.0.0.1:" + std::to_string(port), "rendezvous timeout"});
  EXPECT_GE(r.seconds, 1.4);
  EXPECT_LT(r.seconds, 15.0);
}

TEST(CoreErrors, MasterPortAlreadyInUse) {
  PortHolder holder;
  const int port = holder.port();
  auto r = run_one({{"RANK", "0"},
                    {"WORLD_SIZE", "2"},
                    {"MASTER_ADDR", "127.0.0.1"},
                    {"MASTER_PORT", std::to_string(port)}});
  expect_failure(r, kRendezvous, {"127.0.0.1:" + std::to_string(port), "already in use"});
}

TEST(CoreErrors, MissingRankNamedAfterRendezvousTimeout) {
  auto results = run_ranks(
      2, {"topology", "--rendezvous-timeout-ms", "1500"},
      [](int rank, int world, int port) {
        // Only rank 0 is started: rank 1 of 3 and rank 2 of 3 never come.
        (void)world;
        auto env = torchrun_environment(rank, 3, port);
        return env;
      },
      std::chrono::seconds(30));
  // Rank 0 hosts the store; ranks 0 and 1 joined, rank 2 never did.
  expect_failure(results[0], kRendezvous, {"1 of 3 ranks never joined (missing: 2)"});
  EXPECT_GE(results[0].seconds, 1.4);
  EXPECT_LT(results[0].seconds, 15.0);
}

// Note [One timeout message] (src/comm/timeout_message.hpp): a rank whose peer
// stalls fails with TimeoutError, whose message names the collective, this
// rank, the world size, the timeout, the missing ranks or why they are not
// known, and what to do. The stalled peer leaves only after every other rank
// has exited (Note [A stall that outlasts its peers] in worker.cpp), so the
// failure cannot have come from the peer's arrival, and no upper bound on
// the time is needed: the harness deadline catches a hang. The lower bound
// cannot be hurt by load.
void expect_timed_out(const launch::ChildResult& r, const std::string& what,
                      const std::string& missing) {
  expect_failure(r, kTimeout,
                 {what + " did not finish within 1500 ms" + missing,
                  "check every rank's log (all ranks must issue the same collectives in the same "
                  "order), or raise the collective timeout (InitOptions::collective_timeout, now "
                  "1500 ms)."});
  EXPECT_GE(failed_after_ms(r), 1500) << r.output;
}

void expect_stalled_peer_left_last(const launch::ChildResult& stalled) {
  EXPECT_EQ(stalled.exit_code, 0) << stalled.output;
  EXPECT_NE(stalled.output.find("every other rank had exited; leaving without the collective"),
            std::string::npos)
      << stalled.output;
}

const std::vector<std::string> kStall = {"stall", "--collective-timeout-ms", "1500"};

std::vector<std::string> stall_on(const std::string& backend) {
  auto args = kStall;
  args.insert(args.end(), {"--backend", backend});
  return args;
}

TEST(CoreErrors, StalledPeerTimesOutOnGloo) {
  auto results = run_ranks(2, stall_on("gloo"), torchrun_environment, std::chrono::seconds(60));
  expect_timed_out(results[0], "gloo all_reduce(sum) of 1024 float32 elements on rank 0 of 2",
                   " (the backend does not say which ranks were missing; it said: ");
  expect_stalled_peer_left_last(results[1]);
}

TEST(CoreErrors, StalledPeerTimesOutOnShm) {
  auto results = run_ranks(2, stall_on("shm"), torchrun_environment, std::chrono::seconds(60));
  expect_timed_out(results[0], "shm all_reduce(sum) of 1024 float32 elements on rank 0 of 2",
                   ": rank(s) 1 did not reach it.");
  expect_stalled_peer_left_last(results[1]);
}

TEST(CoreErrors, StalledPeerTimesOutOnTheDefaultBackend) {
  auto results = run_ranks(3, kStall, torchrun_environment, std::chrono::seconds(60));
  for (int rank : {0, 2}) {
    expect_timed_out(
        results[rank],
        "all_reduce(sum) of 1024 float32 elements on rank " + std::to_string(rank) + " of 3", "");
  }
  expect_stalled_peer_left_last(results[1]);
}

// Ranks 0, 1 on node 0 and 2, 3 on node 1; rank 2 (node 1's leader)
// stalls. Rank 3 waits for it inside node 1; rank 0 reached node 0's part
// and waits for node 1 between the leaders; rank 1 waits for rank 0, which
// arrived and stalled inside the collective from its point of view.
TEST(CoreErrors, StalledLeaderTimesOutOnTheHierarchicalBackend) {
  auto args = kStall;
  args.insert(args.end(), {"--stall-rank", "2"});
  auto results = run_ranks(4, args, on_nodes(2), std::chrono::seconds(60));
  expect_timed_out(results[0],
                   "hierarchical all_reduce(sum) of 1024 float32 elements on rank 0 of 4",
                   " (its Gloo step between the node leaders timed out).");
  expect_timed_out(results[3],
                   "hierarchical all_reduce(sum) of 1024 float32 elements on rank 3 of 4",
                   ": rank(s) 2 did not reach it.");
  // Rank 0 gives up at about rank 1's deadline: rank 1 either times out
  // first or sees rank 0 leave the node's group (or its process gone)
  // first; each names rank 0.
  const auto& r1 = results[1];
  const std::string what = "hierarchical all_reduce(sum) of 1024 float32 elements on rank 1 of 4";
  const std::string rank0 = what + " failed: rank 0 (pid " + std::to_string(results[0].pid) + ") ";
  if (r1.exit_code == kTimeout) {
    expect_timed_out(r1, what, ": rank(s) 0 did not reach it.");
  } else if (r1.output.find(rank0 + "left the group") != std::string::npos) {
    expect_failure(r1, kCollective, {rank0 + "left the group without reaching it"});
  } else {
    expect_failure(r1, kCollective, {rank0 + "exited without reaching it"});
  }
  expect_stalled_peer_left_last(results[2]);
}

// A peer that exits is noticed before the timeout: the error is a
// CollectiveError, which a failure after the timeout could not be (Note
// [Classifying foreign errors] in src/comm/work.cpp), and it names the
// collective. The shared-memory backend's case, which also names the dead
// rank's pid: ShmErrors.DeadPeerFailsQuicklyNamingIt.
TEST(CoreErrors, PeerExitFailsGlooCollectiveBeforeTheTimeout) {
  auto results =
      run_ranks(2, {"exit-early", "--backend", "gloo", "--collective-timeout-ms", "20000"},
                torchrun_environment, std::chrono::seconds(60));
  EXPECT_EQ(results[1].exit_code, 0) << describe(results);
  expect_failure(results[0], kCollective,
                 {"gloo all_reduce(sum) of 1024 float32 elements on rank 0 of 2 failed: "});
  EXPECT_GE(failed_after_ms(results[0]), 0) << describe(results);
  EXPECT_LT(failed_after_ms(results[0]), 20000) << describe(results);
}

}  // namespace
}  // namespace ddp::testing

// The shared-memory backend (`shm`) and the hierarchical one, with 1 to 4
// real processes: results equal Gloo's and the closed forms, DDP trains the
// same on it, failures end in an error after the timeout (never a hang), and
// no shared-memory segment outlives its job.

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "comm/shm/shm_checks.hpp"
#include "common/auto_backend_name.hpp"
#include "common/expect_checks.hpp"
#include "ddp/base/errors.hpp"
#include "multiprocess/ddp_checks.hpp"
#include "multiprocess/harness.hpp"
#include "multiprocess/worker_checks.hpp"

namespace ddp::testing {
namespace {

constexpr int kTimeout = static_cast<int>(ExitCode::kTimeout);
constexpr int kCollective = static_cast<int>(ExitCode::kCollective);

// The names of ddp_test_worker's "stress" scenario, which runs kStressIterations
// rounds of the plan in tests/comm/shm/shm_checks.hpp.
std::set<std::string> stress_check_names(int world) {
  std::set<std::string> names;
  for (const auto& round : stress_plan(kStressIterations, world)) {
    for (const auto& collective : round) names.insert(collective.name);
  }
  return names;
}

// `nodes` nodes of `world / nodes` ranks each, as torchrun lays them out.
std::set<std::string> segments_in_dev_shm() {
  std::set<std::string> names;
  if (DIR* dir = opendir("/dev/shm")) {
    while (dirent* entry = readdir(dir)) {
      const std::string name = entry->d_name;
      if (name.rfind("ddp-shm-", 0) == 0) names.insert(name);
    }
    closedir(dir);
  }
  return names;
}

class ShmWorld : public ::testing::TestWithParam<int> {};

TEST_P(ShmWorld, EqualsGlooAndClosedFormsForEveryDtypeOpAndSize) {
  const int world = GetParam();
  auto results = run_ranks(world, {"shm-vs-gloo", "--backend", "gloo"}, torchrun_environment,
                           std::chrono::seconds(200));
  // Every dtype and size: each op against Gloo and the closed form, every
  // root, all-gather, reduce-scatters; one long reduce-scatter; 64 MiB.
  expect_checks(results, shm_against_gloo_check_names(world));
}

TEST_P(ShmWorld, EveryCollectiveMatchesItsClosedForm) {
  const int world = GetParam();
  auto results = run_ranks(world, {"collectives", "--backend", "shm"});
  expect_checks(results, collective_check_names(world));
  for (const auto& r : results) EXPECT_EQ(r.output.find("backend=gloo"), std::string::npos);
}

TEST_P(ShmWorld, OverlappingCollectivesUnderStress) {
  auto results = run_ranks(GetParam(), {"stress", "--backend", "shm"}, torchrun_environment,
                           std::chrono::seconds(120));
  expect_checks(results, stress_check_names(GetParam()));
}

TEST_P(ShmWorld, DistributedDataParallelTrainsAsOneProcess) {
  const int world = GetParam();
  auto results = run_ranks(world, {"ddp", "--backend", "shm"});
  expect_checks_per_rank(results, ddp_check_names);
}

INSTANTIATE_TEST_SUITE_P(Shm, ShmWorld, ::testing::Values(1, 2, 3, 4),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

TEST(ShmAuto, PicksSharedMemoryOnOneNode) {
  auto results = run_ranks(2, {"topology"});
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, 0) << describe(results);
    EXPECT_NE(r.output.find("backend=" + auto_backend_name("shm")), std::string::npos)
        << describe(results);
    EXPECT_NE(r.output.find("sum of ranks=1"), std::string::npos) << describe(results);
  }
}

TEST(ShmHierarchical, AutoPicksItAcrossNodesAndEveryCollectiveIsRight) {
  auto results = run_ranks(4, {"collectives"}, on_nodes(2));
  expect_checks(results, collective_check_names(4));
  auto topology = run_ranks(4, {"topology"}, on_nodes(2));
  for (const auto& r : topology) {
    EXPECT_NE(r.output.find("backend=" + auto_backend_name("hierarchical(shm,gloo)")),
              std::string::npos)
        << describe(topology);
  }
}

TEST(ShmHierarchical, UnevenNodesAndStress) {
  const auto layout = on_uneven_nodes();  // node 0: ranks 0 and 1; node 1: rank 2
  expect_checks(run_ranks(3, {"collectives"}, layout), collective_check_names(3));
  expect_checks(run_ranks(3, {"stress"}, layout, std::chrono::seconds(120)), stress_check_names(3));
}

TEST(ShmHierarchical, DistributedDataParallelTrainsAsOneProcess) {
  expect_checks_per_rank(run_ranks(4, {"ddp"}, on_nodes(2)), ddp_check_names);
}

TEST(ShmErrors, ShmAcrossNodesIsAConfigError) {
  auto results =
      run_ranks(2, {"topology", "--backend", "shm"}, on_nodes(2), std::chrono::seconds(30));
  for (const auto& r : results) {
    EXPECT_EQ(r.exit_code, static_cast<int>(ExitCode::kConfig)) << describe(results);
    EXPECT_NE(r.output.find("backend 'shm' needs every rank on one node, but the 2 ranks are "
                            "on 2 nodes. Use backend 'auto'"),
              std::string::npos)
        << describe(results);
  }
}

// A stalled peer: CoreErrors.StalledPeerTimesOutOnShm (tests/multiprocess/errors_test.cpp).

// Runs `scenario` on 2 shm ranks (20 s collective timeout): rank 1 ends
// cleanly, and rank 0's all-reduce fails before the timeout, saying that
// rank 1 (by its pid) `what` without reaching it.
void expect_peer_named_quickly(const std::string& scenario, const std::string& what) {
  auto results = run_ranks(2, {scenario, "--backend", "shm", "--collective-timeout-ms", "20000"},
                           torchrun_environment, std::chrono::seconds(40));
  EXPECT_EQ(results[1].exit_code, 0) << describe(results);
  EXPECT_EQ(results[0].exit_code, kCollective) << describe(results);
  EXPECT_NE(
      results[0].output.find("shm all_reduce(sum) of 1024 float32 elements on rank 0 of 2 failed: "
                             "rank 1 (pid " +
                             std::to_string(results[1].pid) + ") " + what + " without reaching it"),
      std::string::npos)
      << describe(results);
  // Noticed before the timeout, not by it (a hang is the harness's deadline).
  EXPECT_GE(failed_after_ms(results[0]), 0) << describe(results);
  EXPECT_LT(failed_after_ms(results[0]), 20000) << describe(results);
}

TEST(ShmErrors, DeadPeerFailsQuicklyNamingIt) { expect_peer_named_quickly("exit-early", "exited"); }

// A peer that destroys its side of a group and lives on (an elastic job's
// survivor that moves to the next generation while a subgroup's peer still
// waits in a collective): the waiter fails at once, naming it, instead of
// at its deadline (RankControl::left in src/comm/shm/node_barrier.hpp).
TEST(ShmErrors, PeerThatLeavesTheGroupAliveFailsItsWaiterQuickly) {
  expect_peer_named_quickly("leave-subgroup", "left the group");
}

TEST(ShmSegments, NoSegmentOutlivesItsJobEvenAfterACrash) {
  // Only this test's processes count: under ctest -j other tests create
  // segments of their own (and a deliberately stale one) meanwhile. A
  // segment's name carries its creator's pid ("ddp-shm-<pid>-...").
  auto crashed = run_ranks(2, {"exit-early", "--backend", "shm", "--collective-timeout-ms", "5000"},
                           torchrun_environment, std::chrono::seconds(40));
  auto results = run_ranks(3, {"collectives", "--backend", "shm"});
  expect_checks(results, collective_check_names(3));
  std::vector<std::string> ours;
  for (const auto* run : {&crashed, &results}) {
    for (const auto& r : *run) {
      ASSERT_GT(r.pid, 0) << describe(*run);
      ours.push_back("ddp-shm-" + std::to_string(r.pid) + "-");
    }
  }
  for (const auto& name : segments_in_dev_shm()) {
    for (const auto& prefix : ours) {
      EXPECT_NE(name.rfind(prefix, 0), 0u) << "left behind by one of this test's ranks: " << name;
    }
  }
}

TEST(ShmSegments, StaleSegmentOfADeadCreatorIsRemovedAndDoesNotDisturb) {
  // A process id that no longer exists: a child that has exited and been
  // reaped.
  const pid_t child = fork();
  if (child == 0) _exit(0);
  ASSERT_GT(child, 0);
  waitpid(child, nullptr, 0);
  const std::string stale = "/ddp-shm-" + std::to_string(child) + "-00000000deadbeef";
  const int fd = shm_open(stale.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  ASSERT_GE(fd, 0) << "cannot create " << stale;
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  close(fd);
  ASSERT_TRUE(segments_in_dev_shm().count(stale.substr(1)));

  auto results = run_ranks(2, {"topology", "--backend", "shm"});
  for (const auto& r : results) EXPECT_EQ(r.exit_code, 0) << describe(results);
  EXPECT_FALSE(segments_in_dev_shm().count(stale.substr(1))) << stale << " was not removed";
  shm_unlink(stale.c_str());
}

}  // namespace
}  // namespace ddp::testing

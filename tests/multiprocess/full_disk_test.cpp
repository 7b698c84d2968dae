// Every writer of a training state on a disk that fills (a real tmpfs the
// test mounts, ENOSPC part way through a file) or fails with EIO part way
// (tests/common/failing_writes.cpp, preloaded), at 1 and 3 ranks: a
// SnapshotError on every rank naming the directory and the cause, nothing
// of the failed save left, the previous save intact and loadable, and the
// job saving and training on once the disk works again
// (full_disk_checks.hpp). Then ddp-export on the same disk: its exit code
// and message, no file left. Mounting needs root: without it the suite
// skips, and fails where CI requires it (scripts/run-tests.sh,
// scripts/libtorch2.sh).

#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <string>

#include "common/expect_checks.hpp"
#include "common/mounted_tmpfs.hpp"
#include "common/required_suites.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/launch/child_process.hpp"
#include "multiprocess/full_disk_checks.hpp"
#include "multiprocess/harness.hpp"

namespace ddp::testing {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

constexpr int64_t kDiskBytes = 8 << 20;

using namespace full_disk_check;  // NOLINT(google-build-using-namespace)

// The variables that preload the failing writes for `directory`.
Environment failing_writes_under(const std::string& directory) {
  return {{"LD_PRELOAD", DDP_TEST_FAILING_WRITES},
          {"DDP_TEST_FAIL_WRITES_UNDER", directory},
          {"DDP_TEST_FAIL_WRITES_AT", std::to_string(kFailsFrom)}};
}

// ddp-export of the consolidated file the workers left, into the broken
// disk (then healed): the named error, nothing left, then the export.
void export_tool_on(const std::string& disk, const std::string& phase) {
  const std::string source = disk + "/consolidated-1.ddpsnap", out = disk + "/tool.pt";
  ASSERT_TRUE(fs::exists(source)) << "the workers left no " << source;
  const Environment env = fails_with_eio(phase) ? failing_writes_under(disk) : Environment{};
  const launch::ChildSpec tool{{DDP_EXPORT_TOOL, source, "--to", "torch", out}, env, {}};
  break_disk(disk, phase);
  auto failed = launch::run_children({tool}, 120s)[0];
  EXPECT_EQ(failed.exit_code, static_cast<int>(base::ExitCode::kSnapshot)) << failed.output;
  EXPECT_NE(failed.output.find(out), std::string::npos) << failed.output;
  EXPECT_NE(failed.output.find(cause_of(phase)), std::string::npos) << failed.output;
  EXPECT_FALSE(fs::exists(out));
  EXPECT_FALSE(fs::exists(disk + "/.tool.pt.tmp"));
  heal_disk(disk);
  auto wrote = launch::run_children({tool}, 120s)[0];
  EXPECT_EQ(wrote.exit_code, 0) << wrote.output;
  EXPECT_TRUE(fs::exists(out));
}

void run_on_broken_disk(int world, const std::string& phase) {
  MountedTmpfs disk(kDiskBytes);
  if (!disk.mounted()) {
    DDP_SKIP_UNLESS_REQUIRED(disk.cannot_mount());
  }
  const std::string directory = fs::canonical(disk.string()).string();
  const EnvironmentFor environment_for = [&](int rank, int size, int port) {
    Environment env = torchrun_environment(rank, size, port);
    if (phase == "eio" || (phase == "eio-rank-1" && rank == 1)) {
      for (const auto& [key, value] : failing_writes_under(directory)) env[key] = value;
    }
    return env;
  };
  auto results = run_ranks(world,
                           {"full-disk", "--phase", phase, "--directory", directory, "--backend",
                            "gloo", "--collective-timeout-ms", "20000"},
                           environment_for, 150s);
  for (const auto& r : results) EXPECT_FALSE(r.killed_at_deadline) << describe(results);
  expect_checks_per_rank(results, [&](int rank) { return full_disk_check_names(phase, rank); });
  if (world == 1) export_tool_on(directory, phase);
}

TEST(SnapshotFullDisk, EveryWriterOnOneRank) { run_on_broken_disk(1, "enospc"); }
TEST(SnapshotFullDisk, EveryWriterOnThreeRanks) { run_on_broken_disk(3, "enospc"); }
TEST(SnapshotFullDisk, EveryWriterOnThreeRanksWithNoByteFree) { run_on_broken_disk(3, "full"); }
TEST(SnapshotFullDisk, EveryWriterWithIoErrorsOnOneRank) { run_on_broken_disk(1, "eio"); }
TEST(SnapshotFullDisk, EveryWriterWithIoErrorsOnThreeRanks) { run_on_broken_disk(3, "eio"); }
// Rank 1's disk alone fails: the others' errors carry its cause.
TEST(SnapshotFullDisk, IoErrorsOfOneRankReachEveryRank) { run_on_broken_disk(3, "eio-rank-1"); }

}  // namespace
}  // namespace ddp::testing

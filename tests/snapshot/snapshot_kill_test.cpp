// A real SIGKILL while a large snapshot is being written: at 13 points of
// the write of a 256 MiB snapshot (every 1/12 of its bytes, and once all
// are written), the writer (rank 0 of a one-process
// group, tests/snapshot/snapshot_kill_writer.cpp) is killed; every time the
// previous snapshot must be intact and be the one resumed, unless the new
// one was already complete (renamed into place), which is then resumed. The
// same with save_async(), killed while its background thread writes and the
// training thread computes (Note [An asynchronous save]).

#include <gtest/gtest.h>
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "common/temporary_directory.hpp"
#include "ddp/launch/child_process.hpp"

namespace ddp::launch {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;

constexpr int kKillPoints = 12;

// The complete snapshot files in `dir`, oldest first.
std::vector<fs::path> snapshots(const fs::path& dir) {
  std::vector<fs::path> found;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("snapshot-", 0) == 0 && entry.path().extension() == ".ddpsnap") {
      found.push_back(entry.path());
    }
  }
  std::sort(found.begin(), found.end());
  return found;
}

ChildResult run(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {DDP_SNAPSHOT_KILL_WRITER};
  argv.insert(argv.end(), args.begin(), args.end());
  return run_children({ChildSpec{argv, {}, {}}}, 120s).at(0);
}

// Starts a write of epoch `value` and SIGKILLs the writer as soon as its
// temporary file holds `at_bytes` (watched every millisecond), or, when
// `at_bytes` is the whole size, once the file is complete (during its fsync
// and rename). Returns the temporary file's size at the kill (-1: none) and
// whether the writer got to print "saved".
struct Kill {
  std::intmax_t temp_bytes = -1;
  bool saved = false;
  bool training = false;  // save_async() had returned: the training thread ran on
};
Kill write_and_kill(const std::string& mode, const fs::path& dir, int value,
                    std::uintmax_t at_bytes) {
  const fs::path temp = dir / ".snapshot-000000000002.ddpsnap.tmp";
  ChildProcess writer({{DDP_SNAPSHOT_KILL_WRITER, mode, dir.string(), std::to_string(value)}},
                      /*separate_stderr=*/false);
  std::string output;
  auto sink = [&](Stream, std::string_view chunk) { output.append(chunk); };
  const auto give_up = Clock::now() + 60s;
  Kill kill;
  while (!writer.finished() && Clock::now() < give_up) {
    wait_for_output({&writer}, 1ms);
    writer.pump(sink);
    writer.reap();
    if (output.find("writing\n") == std::string::npos) continue;
    std::error_code missing;
    const auto size = fs::file_size(temp, missing);
    if (!missing && size >= at_bytes) {
      kill.temp_bytes = static_cast<std::intmax_t>(size);
      break;
    }
  }
  writer.signal_group(SIGKILL);
  writer.reap_blocking();
  writer.pump(sink);
  EXPECT_NE(output.find("writing\n"), std::string::npos) << output;
  kill.saved = output.find("saved ") != std::string::npos;
  kill.training = output.find("training\n") != std::string::npos;
  return kill;
}

// Writes a base snapshot with `mode` (write, write-async), then kills the
// next write at every point; the previous snapshot must survive each.
void kill_at_many_points(const std::string& mode) {
  const ddp::testing::TemporaryDirectory temporary("ddp-snapshot-kill-");
  const fs::path dir = temporary.path();
  ASSERT_EQ(run({mode, dir.string(), "1"}).exit_code, 0);
  ASSERT_EQ(snapshots(dir).size(), 1u);
  const fs::path base = snapshots(dir).at(0);
  const auto base_size = fs::file_size(base);  // the new snapshot's size too
  const auto base_time = fs::last_write_time(base);
  EXPECT_GT(base_size, 256u << 20);

  int mid_write = 0;
  int completed = 0;
  // Kill points 0 .. kKillPoints - 1 at every 1/kKillPoints of the bytes,
  // the last one with all bytes written.
  for (int point = 0; point <= kKillPoints; ++point) {
    const Kill kill = write_and_kill(mode, dir, 2, base_size * point / kKillPoints);
    const auto complete = snapshots(dir);
    ASSERT_GE(complete.size(), 1u);
    EXPECT_EQ(complete.front(), base);
    EXPECT_EQ(fs::file_size(base), base_size) << "kill point " << point;
    EXPECT_EQ(fs::last_write_time(base), base_time) << "kill point " << point;
    const bool new_one = complete.size() == 2;
    if (kill.temp_bytes >= 0 && static_cast<std::uintmax_t>(kill.temp_bytes) < base_size &&
        !new_one) {
      ++mid_write;
      // The background thread wrote while the training thread trained
      // (from point 1 on: megabytes written, long after save_async returned).
      if (mode == "write-async" && point > 0) {
        EXPECT_TRUE(kill.training) << "kill point " << point;
      }
    }
    if (new_one) ++completed;

    const ChildResult check = run({"check", dir.string()});
    const std::string expected =
        new_one ? "resumed epoch 2, every weight 2" : "resumed epoch 1, every weight 1";
    EXPECT_EQ(check.exit_code, 0) << check.output;
    EXPECT_NE(check.output.find(expected), std::string::npos)
        << "kill point " << point << " (" << kill.temp_bytes
        << " bytes of the new snapshot written):\n"
        << check.output;
    EXPECT_EQ(check.output.find("skipping"), std::string::npos) << check.output;
    // Back to the base for the next point. (That a later save removes a
    // killed writer's temporary file is SnapshotTest's concern; here it
    // would make a stale file look like this write's.)
    if (new_one) fs::remove(complete.back());
    fs::remove(dir / ".snapshot-000000000002.ddpsnap.tmp");
  }
  std::cout << mode << ": of " << kKillPoints + 1 << " kills, " << mid_write
            << " hit a partial file, " << completed << " came after the rename" << std::endl;
  // The kills really landed inside the write, at most of the points.
  EXPECT_GE(mid_write, kKillPoints / 2) << completed << " kills came after the rename";
}

TEST(SnapshotKill, KilledAtManyPointsOfALargeWriteThePreviousSnapshotSurvives) {
  kill_at_many_points("write");
}

TEST(SnapshotKill, KilledAtManyPointsOfABackgroundWriteThePreviousSnapshotSurvives) {
  kill_at_many_points("write-async");
}

}  // namespace
}  // namespace ddp::launch

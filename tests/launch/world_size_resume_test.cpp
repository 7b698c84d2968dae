// A snapshot taken at one world size resumes at another (Note [Resuming at
// another world size]): the toy trainer saves after 10 steps at 2 ranks,
// and the epoch finished at 1 rank and at 3 ranks sees every sample of the
// data set, none skipped and none repeated but the padding.

#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <set>
#include <sstream>

#include "common/temporary_directory.hpp"
#include "launch/launcher_runs.hpp"

namespace ddp::launch {
namespace {

using namespace std::chrono_literals;

constexpr int kSamples = 2048;  // the toy trainer's data set

// Every index in the "epoch 0 samples ..." lines of `output`, with repeats.
std::multiset<int64_t> samples_seen(const std::string& output) {
  std::multiset<int64_t> seen;
  std::istringstream lines(output);
  const std::string marker = "] epoch 0 samples";
  for (std::string line; std::getline(lines, line);) {
    const size_t at = line.find(marker);
    if (at == std::string::npos) continue;
    std::istringstream indices(line.substr(at + marker.size()));
    for (int64_t i; indices >> i;) seen.insert(i);
  }
  return seen;
}

ChildResult toy(int nproc, const std::string& snapshot_dir, const std::string& max_steps) {
  return run_launcher(
      {"--standalone", "--nproc-per-node", std::to_string(nproc), DDP_TOY_TRAINER, "--epochs", "1",
       "--seed", "3", "--max-steps", max_steps, "--save-every-steps", "10", "--no-trace-steps",
       "--trace-samples", "--snapshot-dir", snapshot_dir},
      120s);
}

TEST(LauncherWorldSize, SnapshotAtTwoRanksResumesTheEpochAtOneAndAtThree) {
  namespace fs = std::filesystem;
  const ddp::testing::TemporaryDirectory snapshots("ddp-resize-");
  const std::string base = snapshots.string();
  const ChildResult first = toy(2, base + "/saved", "10");
  ASSERT_EQ(first.exit_code, 0) << first.output;
  const std::multiset<int64_t> before = samples_seen(first.output);
  ASSERT_EQ(before.size(), 10u * 2 * 32) << first.output;  // 10 steps, 2 ranks, batch 32
  ASSERT_EQ(std::set<int64_t>(before.begin(), before.end()).size(), before.size());

  for (int world : {1, 3}) {
    SCOPED_TRACE("resumed at " + std::to_string(world) + " rank(s)");
    const std::string dir = base + "/at" + std::to_string(world);
    fs::copy(base + "/saved", dir, fs::copy_options::recursive);
    const ChildResult resumed = toy(world, dir, "0");
    ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
    EXPECT_NE(resumed.output.find("written by 2 rank(s), at " + std::to_string(world) +
                                  ": the model, optimizer, scheduler and scaler load unchanged; "
                                  "the epoch continues from sample 640 of its order"),
              std::string::npos)
        << resumed.output;
    const std::multiset<int64_t> after = samples_seen(resumed.output);
    // 1408 samples left, padded to a multiple of the ranks from the
    // epoch's start (as PyTorch pads): 1408 at 1 rank, 3 x 470 at 3.
    const size_t left = kSamples - before.size();
    const size_t padded = (left + world - 1) / world * world;
    EXPECT_EQ(after.size(), padded);
    std::set<int64_t> all(before.begin(), before.end());
    all.insert(after.begin(), after.end());
    EXPECT_EQ(all.size(), static_cast<size_t>(kSamples));
    EXPECT_EQ(*all.begin(), 0);
    EXPECT_EQ(*all.rbegin(), kSamples - 1);
    size_t repeated = 0;
    for (int64_t i : after) repeated += before.count(i) + (after.count(i) - 1);
    EXPECT_EQ(repeated, padded - left) << "only the padding may repeat a sample";
  }
}

}  // namespace
}  // namespace ddp::launch

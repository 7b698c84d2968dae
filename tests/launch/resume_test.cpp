// The promise of snapshots and restarts together: a worker SIGKILLed at a
// step chosen at random, restarted by ddprun, finishes with parameters
// bit-identical to an uninterrupted run with the same seed.

#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <iostream>
#include <random>
#include <regex>

#include "common/temporary_directory.hpp"
#include "ddp/launch/child_process.hpp"

namespace ddp::launch {
namespace {

using namespace std::chrono_literals;

ChildSpec toy_job(const std::string& snapshot_dir) {
  return ChildSpec{{DDP_DDPRUN,
                    "--standalone",
                    "--nproc-per-node",
                    "2",
                    "--max-restarts",
                    "3",
                    "--monitor-interval",
                    "0.1",
                    "--stop-grace",
                    "2",
                    DDP_TOY_TRAINER,
                    "--epochs",
                    "2",
                    "--seed",
                    "7",
                    "--save-every-steps",
                    "4",
                    "--step-delay-ms",
                    "15",
                    "--snapshot-dir",
                    snapshot_dir},
                   {},
                   {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}};
}

std::string digest_of(const std::string& output) {
  std::smatch m;
  return std::regex_search(output, m, std::regex(R"(params-digest=([0-9a-f]{16}))")) ? m[1].str()
                                                                                     : "<none>";
}

class LauncherResume : public ::testing::TestWithParam<int> {};

TEST_P(LauncherResume, WorkerKilledAtARandomStepResumesBitIdentically) {
  const ddp::testing::TemporaryDirectory straight_snapshots("ddp-resume-"),
      killed_snapshots("ddp-resume-");
  const std::string straight_dir = straight_snapshots.string(),
                    killed_dir = killed_snapshots.string();
  auto straight = run_children({toy_job(straight_dir)}, 120s).at(0);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const std::string expected = digest_of(straight.output);
  ASSERT_NE(expected, "<none>") << straight.output;

  // 2 epochs of 2048 / (2 ranks x 32) = 32 steps each.
  std::mt19937 random(GetParam());
  const int kill_at = std::uniform_int_distribution<int>(2, 60)(random);
  std::cout << "killing rank 1 at step " << kill_at << std::endl;
  ChildProcess job(toy_job(killed_dir), false);
  std::string output;
  pid_t victim = -1;
  bool killed = false;
  const auto deadline = std::chrono::steady_clock::now() + 120s;
  while (!job.finished() && std::chrono::steady_clock::now() < deadline) {
    wait_for_output({&job}, 20ms);
    job.pump([&](Stream, std::string_view chunk) { output.append(chunk); });
    job.reap();
    std::smatch m;
    if (victim < 0 && std::regex_search(output, m, std::regex(R"(\[1\] pid (\d+))"))) {
      victim = std::stoi(m[1]);
    }
    if (!killed && victim > 0 &&
        std::regex_search(output,
                          std::regex("\\[1\\] epoch \\d+ step " + std::to_string(kill_at) + " "))) {
      kill(victim, SIGKILL);
      killed = true;
    }
  }
  if (!job.exited()) job.signal_group(SIGKILL);
  ASSERT_TRUE(killed) << "never reached step " << kill_at << ":\n" << output;
  EXPECT_EQ(job.exit_code(), 0) << output;
  EXPECT_NE(output.find("ended with signal 9 (Killed)"), std::string::npos) << output;
  EXPECT_NE(output.find("(restart 1 of 3)"), std::string::npos) << output;
  if (kill_at >= 4) EXPECT_NE(output.find("[0] resumed at epoch"), std::string::npos) << output;
  EXPECT_EQ(digest_of(output), expected) << "killed at step " << kill_at << "\n" << output;
}

INSTANTIATE_TEST_SUITE_P(Launcher, LauncherResume, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return "Seed" + std::to_string(info.param); });

}  // namespace
}  // namespace ddp::launch

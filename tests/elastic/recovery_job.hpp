#pragma once

// The job of the recovery tests: ddprun --recovery memory running three
// (or kWorkers) toy-trainer workers that commit in memory every kCommitEvery steps, and
// what they print.

#include <gtest/gtest.h>

#include <functional>
#include <regex>
#include <string>
#include <vector>

#include "launch/launcher_runs.hpp"

namespace ddp::launch {

inline constexpr int kCommitEvery = 4;

/// Rank 1 SIGKILLs itself after step `kill_at` (0: never); `launcher_args`
/// go to ddprun before the program (e.g. {"--spares", "1"}), `trainer_args`
/// to the toy trainer (e.g. {"--zero-stage", "2"}); `workers` of them.
inline ChildSpec toy_job(int kill_at, const std::vector<std::string>& launcher_args = {},
                         const std::vector<std::string>& trainer_args = {}, int workers = 3) {
  std::vector<std::string> args = {"--standalone",
                                   "--nproc-per-node",
                                   std::to_string(workers),
                                   "--max-restarts",
                                   "2",
                                   "--monitor-interval",
                                   "0.1",
                                   "--stop-grace",
                                   "2",
                                   "--recovery",
                                   "memory"};
  args.insert(args.end(), launcher_args.begin(), launcher_args.end());
  args.insert(args.end(), {DDP_TOY_TRAINER, "--epochs", "2", "--seed", "7", "--commit-every",
                           std::to_string(kCommitEvery)});
  args.insert(args.end(), trainer_args.begin(), trainer_args.end());
  if (kill_at > 0) {
    args.push_back("--kill-at");
    args.push_back("1:" + std::to_string(kill_at));
  }
  return ddprun(args);
}

/// The params-digest rank 0 printed, or "<none>".
inline std::string digest_of(const std::string& output) {
  std::smatch m;
  return std::regex_search(output, m, std::regex(R"(params-digest=([0-9a-f]{16}))")) ? m[1].str()
                                                                                     : "<none>";
}

/// The pids rank `rank` printed, in order (one "pid P" per generation).
inline std::vector<std::string> pids_of(const std::string& output, int rank) {
  std::vector<std::string> pids;
  const std::regex line("\\[" + std::to_string(rank) + "\\] pid (\\d+)");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), line);
       it != std::sregex_iterator(); ++it) {
    pids.push_back((*it)[1].str());
  }
  return pids;
}

/// The ranks other than 1 of `world` kept their processes across the
/// failure (one `pid` line per generation, equal); rank 1's second process
/// is another.
inline void expect_only_rank_1_replaced(const std::string& output, int world = 3) {
  for (int survivor = 0; survivor < world; ++survivor) {
    if (survivor == 1) continue;
    const auto pids = pids_of(output, survivor);
    ASSERT_EQ(pids.size(), 2u) << "rank " << survivor << "\n" << output;
    EXPECT_EQ(pids[0], pids[1]) << "rank " << survivor;
  }
  const auto replaced = pids_of(output, 1);
  ASSERT_EQ(replaced.size(), 2u) << output;
  EXPECT_NE(replaced[1], replaced[0]);
}

/// Each of the `world` ranks continued in `generation` from commit `commit`
/// of rank 0.
inline void expect_continuing(const std::string& output, int generation, int commit,
                              int world = 3) {
  for (int rank = 0; rank < world; ++rank) {
    const std::string r = std::to_string(rank);
    EXPECT_TRUE(contains(output, "[" + r + "] ddp: rank " + r + ": generation " +
                                     std::to_string(generation) + ": continuing from commit " +
                                     std::to_string(commit) + " of rank 0"))
        << "rank " << rank << "\n"
        << output;
  }
}

/// A job with sharded state (`job(kill_at)`: ZeRO, FSDP) of `world` workers
/// recovers as it must: run straight, then with rank 1 SIGKILLed after step
/// `kill_at`, the replacement alone restarted, taking its shard from rank
/// 2, the survivors keeping their processes, and the same digest at the end.
inline void expect_replaced_alone_bit_identically(const std::function<ChildSpec(int)>& job,
                                                  int kill_at, const std::string& what,
                                                  int world = 3) {
  using namespace std::chrono_literals;
  const ChildResult straight = run_children({job(0)}, 150s).at(0);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const std::string expected = digest_of(straight.output);
  ASSERT_NE(expected, "<none>") << straight.output;

  const ChildResult killed = run_children({job(kill_at)}, 150s).at(0);
  const std::string& output = killed.output;
  EXPECT_EQ(killed.exit_code, 0) << output;
  EXPECT_TRUE(contains(output, "[1] epoch 0 step " + std::to_string(kill_at) + " ")) << output;
  EXPECT_TRUE(contains(output, "ended with signal 9 (Killed)")) << output;
  EXPECT_TRUE(contains(output, "starting it again alone in generation 1")) << output;
  EXPECT_FALSE(contains(output, "restarting every worker")) << output;
  expect_only_rank_1_replaced(output, world);
  const int commits = 1 + kill_at / kCommitEvery;  // the start's, then one every 4 steps
  expect_continuing(output, 1, commits, world);
  EXPECT_FALSE(contains(output, "resumed at epoch")) << output;
  EXPECT_EQ(digest_of(output), expected) << what << ", killed at step " << kill_at << "\n"
                                         << output;
}

}  // namespace ddp::launch

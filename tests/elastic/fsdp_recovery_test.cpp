// ddprun --recovery memory with FullyShardedDataParallel, for real: three
// toy-trainer workers train with --shard full (the Linear one unit, its 21
// parameters sharded 7 per rank) and SGD with momentum, committing every 4
// steps, so each rank's shard of the parameters and of the momentum is
// kept by it and by the next rank (Note [Sharded state in memory] in
// ddp/elastic/state.hpp). Rank 1 SIGKILLs itself; its replacement gets its
// shard from rank 2, the survivors keep their processes, and the job ends
// bit-identical to an uninterrupted FSDP run.

#include <gtest/gtest.h>

#include <string>

#include "elastic/recovery_job.hpp"

namespace ddp::launch {
namespace {

using namespace std::chrono_literals;

// FSDP, SGD with momentum; rank 1 SIGKILLs itself after step `kill_at` (0: never).
ChildSpec fsdp_toy_job(int kill_at) {
  return toy_job(kill_at, {}, {"--shard", "full", "--momentum", "0.9"});
}

TEST(ElasticFsdpRecovery, KilledRankGetsItsShardFromItsBuddyAndTheJobEndsBitIdentically) {
  constexpr int kKillAt = 9;
  const ChildResult straight = run_children({fsdp_toy_job(0)}, 150s).at(0);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const std::string expected = digest_of(straight.output);
  ASSERT_NE(expected, "<none>") << straight.output;

  const ChildResult killed = run_children({fsdp_toy_job(kKillAt)}, 150s).at(0);
  const std::string& output = killed.output;
  EXPECT_EQ(killed.exit_code, 0) << output;
  EXPECT_TRUE(contains(output, "[1] epoch 0 step " + std::to_string(kKillAt) + " ")) << output;
  EXPECT_TRUE(contains(output, "ended with signal 9 (Killed)")) << output;
  EXPECT_TRUE(contains(output, "starting it again alone in generation 1")) << output;
  EXPECT_FALSE(contains(output, "restarting every worker")) << output;
  expect_only_rank_1_replaced(output);
  const int commits = 1 + kKillAt / kCommitEvery;  // the start's, then one every 4 steps
  expect_continuing(output, 1, commits);
  EXPECT_FALSE(contains(output, "resumed at epoch")) << output;
  EXPECT_EQ(digest_of(output), expected) << "killed at step " << kKillAt << "\n" << output;
}

}  // namespace
}  // namespace ddp::launch

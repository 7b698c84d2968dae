// ddprun --recovery memory, for real: three toy-trainer workers commit in
// memory every 4 steps; rank 1 SIGKILLs itself after a given step; ddprun starts
// it again alone, the survivors keep their processes (the same pids before
// and after), roll back to their last commit and hand it to the
// replacement, and the job ends with parameters bit-identical to an
// uninterrupted run. No snapshot directory exists, so nothing came from
// disk.

#include <gtest/gtest.h>

#include <regex>
#include <set>
#include <string>
#include <vector>

#include "ddp/launch/port_reservation.hpp"
#include "elastic/recovery_job.hpp"

namespace ddp::launch {
namespace {

using namespace std::chrono_literals;

class ElasticRecovery : public ::testing::TestWithParam<int> {};

// Step 2 falls before the first periodic commit (the survivors go back to
// the start-up commit); step 9 falls one step after the commit of step 8.
TEST_P(ElasticRecovery, KilledWorkerIsReplacedAloneAndTheJobEndsBitIdentically) {
  const int kill_at = GetParam();
  const ChildResult straight = run_children({toy_job(0)}, 150s).at(0);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const std::string expected = digest_of(straight.output);
  ASSERT_NE(expected, "<none>") << straight.output;

  const ChildResult killed = run_children({toy_job(kill_at)}, 150s).at(0);
  const std::string& output = killed.output;
  EXPECT_EQ(killed.exit_code, 0) << output;
  EXPECT_TRUE(contains(output, "[1] epoch 0 step " + std::to_string(kill_at) + " ")) << output;
  EXPECT_TRUE(contains(output, "ended with signal 9 (Killed)")) << output;
  EXPECT_TRUE(contains(output,
                       "; starting it again alone in generation 1, the other workers keep "
                       "their state (recovery in memory, restart 1 of 2)"))
      << output;
  EXPECT_FALSE(contains(output, "restarting every worker")) << output;
  // The survivors kept their processes; rank 1 is a new one.
  expect_only_rank_1_replaced(output);
  // Commit 1 is the start's; one more every 4 steps the whole job finished.
  const int commits = 1 + kill_at / kCommitEvery;
  expect_continuing(output, 1, commits);
  for (int survivor : {0, 2}) {
    EXPECT_TRUE(contains(output, "[" + std::to_string(survivor) + "] ddp: rank " +
                                     std::to_string(survivor) + ": generation 0 lost a peer: "))
        << output;
  }
  EXPECT_FALSE(contains(output, "resumed at epoch")) << output;
  EXPECT_EQ(digest_of(output), expected) << "killed at step " << kill_at << "\n" << output;
}

INSTANTIATE_TEST_SUITE_P(Launcher, ElasticRecovery, ::testing::Values(2, 9),
                         [](const auto& info) { return "Step" + std::to_string(info.param); });

// Two nodes on loopback, one worker each, node 0 hosting the recovery
// store: rank 1, on node 1, is lost and replaced there; node 0's agent
// restarts nothing and its worker keeps its process.
TEST(ElasticRecoveryNodes, AWorkerLostOnTheSecondNodeIsReplacedThereAlone) {
  const PortReservation reserved;
  const std::string port = std::to_string(reserved.port());
  auto node = [&](int rank, int kill_at) {
    std::vector<std::string> args = two_node_args(rank, port, "elastic", "30");
    args.insert(args.end(), {"--recovery", "memory", DDP_TOY_TRAINER, "--epochs", "1", "--seed",
                             "7", "--commit-every", std::to_string(kCommitEvery)});
    if (kill_at > 0) {
      args.push_back("--kill-at");
      args.push_back("1:" + std::to_string(kill_at));
    }
    return ddprun(args);
  };
  const auto straight = run_children({node(0, 0), node(1, 0)}, 120s);
  ASSERT_EQ(straight[0].exit_code, 0) << straight[0].output << straight[1].output;
  const std::string expected = digest_of(straight[0].output);
  ASSERT_NE(expected, "<none>") << straight[0].output;

  const auto killed = run_children({node(0, 9), node(1, 9)}, 120s);
  const std::string& first = killed[0].output;
  const std::string& second = killed[1].output;
  EXPECT_EQ(killed[0].exit_code, 0) << first << second;
  EXPECT_EQ(killed[1].exit_code, 0) << first << second;
  EXPECT_TRUE(contains(second, "ended with signal 9 (Killed)")) << second;
  EXPECT_TRUE(contains(second, "starting it again alone in generation 1")) << second;
  EXPECT_FALSE(contains(first, "ended with")) << first;
  EXPECT_FALSE(contains(first + second, "restarting every worker")) << first << second;
  const auto pids = pids_of(first, 0);
  ASSERT_EQ(pids.size(), 2u) << first;
  EXPECT_EQ(pids[0], pids[1]);
  EXPECT_TRUE(contains(first, "[0] ddp: rank 0: generation 1: continuing from commit 3 of rank 0"))
      << first;
  EXPECT_TRUE(contains(second, "[1] ddp: rank 1: generation 1: continuing from commit 3 of rank 0"))
      << second;
  EXPECT_EQ(digest_of(first), expected) << first << second;
}

// Two workers lost within one step: the agent replaces each alone, in
// generations 1 and 2; rank 0 keeps its process and the job ends as if
// nothing had happened.
TEST(ElasticChaos, TwoWorkersLostWithinOneStepAreEachReplacedAlone) {
  const ChildResult straight = run_children({toy_job(0)}, 150s).at(0);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const ChildResult r = run_children({toy_job(0, {}, {"--kill-at", "1:9,2:9"})}, 150s).at(0);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "ended with signal 9 (Killed)"), 2) << r.output;
  EXPECT_TRUE(contains(r.output, "starting it again alone in generation 1")) << r.output;
  EXPECT_TRUE(contains(r.output, "starting it again alone in generation 2")) << r.output;
  const auto pids = pids_of(r.output, 0);
  ASSERT_EQ(pids.size(), 2u) << r.output;
  EXPECT_EQ(pids[0], pids[1]);
  EXPECT_TRUE(
      contains(r.output, "[0] ddp: rank 0: generation 2: continuing from commit 3 of rank 0"))
      << r.output;
  EXPECT_EQ(digest_of(r.output), digest_of(straight.output)) << r.output;
}

// A ZeRO commit is a collective: a rank lost as it enters one fails the
// others' all-gather, so every rank rolls back to the commit before (2, of
// step 4), and the lost rank's shard comes from its buddy.
TEST(ElasticChaos, AWorkerLostInsideAZeroCommitRollsBackToThePreviousCommit) {
  const std::vector<std::string> zero = {"--zero-stage", "1", "--momentum", "0.9"};
  const ChildResult straight = run_children({toy_job(0, {}, zero)}, 150s).at(0);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  std::vector<std::string> killing = zero;
  killing.insert(killing.end(), {"--kill-in-commit", "1:8"});
  const ChildResult r = run_children({toy_job(0, {}, killing)}, 150s).at(0);
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "lost a peer: gloo all_gather")) << r.output;
  expect_continuing(r.output, 1, 2);
  EXPECT_EQ(digest_of(r.output), digest_of(straight.output)) << r.output;
}

TEST(ElasticRecoveryOptions, AnUnknownRecoveryIsRefused) {
  const ChildResult r = run_launcher({"--standalone", "--recovery", "ram", DDP_TOY_TRAINER});
  EXPECT_NE(r.exit_code, 0);
  EXPECT_TRUE(contains(r.output, "--recovery is 'ram'; it must be 'disk'")) << r.output;
}

}  // namespace
}  // namespace ddp::launch

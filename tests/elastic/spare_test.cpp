// ddprun --spares, for real: hot spares start with the job and wait inside
// ddp::elastic::run; when rank 1 SIGKILLs itself, a spare takes its rank
// instead of a new process, receives the survivors' commit, and the job
// ends bit-identical to an uninterrupted run without spares. Spares that
// were not needed end with the job; a program that calls ddp::init() itself
// is named once and gets no more spares; a worker whose snapshot cannot be
// written gets none either.

#include <gtest/gtest.h>

#include <fstream>
#include <regex>
#include <string>
#include <vector>

#include "common/temporary_directory.hpp"
#include "elastic/recovery_job.hpp"

namespace ddp::launch {
namespace {

using namespace std::chrono_literals;

// (id, pid) of each "started spare ID (pid P)" line, in order.
std::vector<std::pair<std::string, std::string>> started_spares(const std::string& output) {
  std::vector<std::pair<std::string, std::string>> spares;
  const std::regex line(R"(ddprun: started spare ([0-9a-f]{8}) \(pid (\d+)\))");
  for (auto it = std::sregex_iterator(output.begin(), output.end(), line);
       it != std::sregex_iterator(); ++it) {
    spares.emplace_back((*it)[1].str(), (*it)[2].str());
  }
  return spares;
}

// The toy trainer with `trainer_args` (none: DDP and SGD), run straight and
// with a spare that takes over rank 1 after its SIGKILL at step 9.
void expect_spare_takes_over(const std::vector<std::string>& trainer_args) {
  const ChildResult straight = run_children({toy_job(0, {}, trainer_args)}, 150s).at(0);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const std::string expected = digest_of(straight.output);
  ASSERT_NE(expected, "<none>") << straight.output;

  const ChildResult killed =
      run_children({toy_job(9, {"--spares", "1"}, trainer_args)}, 150s).at(0);
  const std::string& output = killed.output;
  EXPECT_EQ(killed.exit_code, 0) << output;
  const auto spares = started_spares(output);
  ASSERT_EQ(spares.size(), 2u) << output;  // the first, and the one started after its promotion
  const auto [id, pid] = spares[0];
  const size_t kill = output.find("[1] epoch 0 step 9 ");
  ASSERT_NE(kill, std::string::npos) << output;
  EXPECT_LT(output.find("started spare " + id), kill) << output;

  // Its agent gave rank 1 to the spare, which printed the new rank's pid.
  std::smatch taken;
  ASSERT_TRUE(std::regex_search(
      output, taken,
      std::regex("ended with signal 9 \\(Killed\\) \\(it recorded no error\\); spare " + id +
                 " \\(pid " + pid +
                 ", (ready for \\d+ ms|still starting)\\) takes rank 1 in generation 1, the other "
                 "workers keep their state \\(recovery in memory, restart 1 of 2\\)")))
      << output;
  EXPECT_TRUE(contains(output, "[1] ddp: spare " + id + " takes rank 1 of 3 in generation 1"))
      << output;
  const auto rank1 = pids_of(output, 1);
  ASSERT_EQ(rank1.size(), 2u) << output;
  EXPECT_NE(rank1[0], pid);
  EXPECT_EQ(rank1[1], pid) << output;
  EXPECT_FALSE(contains(output, "starting it again alone")) << output;
  EXPECT_FALSE(contains(output, "restarting every worker")) << output;
  for (int survivor : {0, 2}) {
    const auto pids = pids_of(output, survivor);
    ASSERT_EQ(pids.size(), 2u) << "rank " << survivor << "\n" << output;
    EXPECT_EQ(pids[0], pids[1]) << "rank " << survivor;
  }
  expect_continuing(output, 1, 3);
  // The next spare starts after the promotion (once the promoted spare has
  // the state: its loading would slow the recovery it is there to speed).
  EXPECT_GT(output.find("started spare " + spares[1].first), output.find("takes rank 1 in"))
      << output;
  EXPECT_EQ(digest_of(output), expected) << output;
}

TEST(ElasticSpares, KilledWorkerIsTakenOverByASpareStartedBeforeTheKill) {
  expect_spare_takes_over({});
}

// FSDP: the spare receives rank 1's shard of the parameters and of the
// momentum from rank 2, which kept a copy (Note [Sharded state in memory]).
TEST(ElasticSpares, KilledFsdpWorkerIsTakenOverByASpareWithItsShard) {
  expect_spare_takes_over({"--shard", "full", "--momentum", "0.9"});
}

TEST(ElasticSpares, UnusedSparesAreReleased) {
  const ChildResult straight = run_children({toy_job(0)}, 150s).at(0);
  ASSERT_EQ(straight.exit_code, 0) << straight.output;
  const ChildResult spared = run_children({toy_job(0, {"--spares", "2"})}, 150s).at(0);
  const std::string& output = spared.output;
  EXPECT_EQ(spared.exit_code, 0) << output;
  const auto spares = started_spares(output);
  ASSERT_EQ(spares.size(), 2u) << output;
  for (const auto& [id, pid] : spares) {
    EXPECT_FALSE(contains(output, "[spare " + id + "]")) << output;  // it printed nothing
    EXPECT_FALSE(contains(output, "spare " + id + " (pid " + pid + ") ended")) << output;
  }
  EXPECT_FALSE(contains(output, "takes rank")) << output;
  EXPECT_EQ(count(output, "] pid "), 3) << output;  // the three workers', once each
  EXPECT_EQ(digest_of(output), digest_of(straight.output)) << output;
}

// ddp_launch_worker calls ddp::init() itself, so a spare of it cannot wait
// for a seat: the spare is refused with a named error, once. (Rank 0 waits
// for the spare's error file, so the job outlives the spare.)
TEST(ElasticSpares, ProgramWithoutElasticRunIsNamed) {
  const ChildResult r =
      run_launcher({"--standalone", "--nproc-per-node", "2", "--recovery", "memory", "--spares",
                    "1", "--stop-grace", "30", DDP_LAUNCH_WORKER, "spare-refused"});
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_EQ(count(r.output, "ddprun: started spare "), 1) << r.output;
  EXPECT_EQ(count(r.output,
                  ") ended with exit 3 before it was needed: this process is a hot "
                  "spare of ddprun --spares (DDP_SPARE="),
            1)
      << r.output;
  EXPECT_EQ(count(r.output, "ddprun: starting no more spares: one ended before it was ready"), 1)
      << r.output;
  EXPECT_EQ(count(r.output, "attempt 0: sum of ranks 1"), 2) << r.output;
}

// Issue 71 point 1: a worker that ends with a SnapshotError (exit 9: its
// snapshot cannot be written) is not handed to a spare, which would meet
// the same disk; ddprun ends the job at once, naming the failure, as it
// does without spares (LauncherRestarts.SnapshotErrorEndsTheJobWithoutARestartLoop).
TEST(ElasticSpares, ASnapshotErrorIsNotHandedToASpare) {
  const ddp::testing::TemporaryDirectory snapshots("ddprun-spare-eio-");
  const std::string dir = snapshots.string();
  std::ofstream(dir + "/.fail-writes") << "armed";
  ChildSpec spec =
      toy_job(0, {"--spares", "1"}, {"--snapshot-dir", dir, "--save-every-steps", "4"});
  spec.env = {{"LD_PRELOAD", DDP_TEST_FAILING_WRITES},
              {"DDP_TEST_FAIL_WRITES_UNDER", dir},
              {"DDP_TEST_FAIL_WRITES_AT", "0"}};
  const ChildResult r = run_children({spec}, 150s).at(0);
  const std::string& output = r.output;
  EXPECT_EQ(r.exit_code, 1) << output;
  ASSERT_FALSE(started_spares(output).empty()) << output;  // a spare was there to take it
  EXPECT_TRUE(contains(output, "ended with exit 9: ")) << output;
  EXPECT_TRUE(contains(output, "; not restarting (a snapshot that cannot be written or read"))
      << output;
  EXPECT_FALSE(contains(output, "takes rank")) << output;
  EXPECT_FALSE(contains(output, "generation 1")) << output;
}

TEST(ElasticSpareOptions, SparesNeedRecoveryInMemory) {
  const ChildResult r = run_launcher({"--standalone", "--spares", "1", DDP_TOY_TRAINER});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_TRUE(contains(r.output,
                       "--spares 1 needs --recovery memory: a spare takes a lost worker's rank "
                       "inside ddp::elastic::run, while --recovery disk restarts every worker."))
      << r.output;
}

TEST(ElasticSpareOptions, ANegativeCountIsRefused) {
  const ChildResult r =
      run_launcher({"--standalone", "--recovery", "memory", "--spares", "-1", DDP_TOY_TRAINER});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_TRUE(contains(r.output, "--spares is -1; it must be 0 or more hot spares per node."))
      << r.output;
}

TEST(ElasticSpareOptions, GpuWorkersAreRefused) {
  const ChildResult r = run_launcher({"--standalone", "--nproc-per-node", "gpu", "--recovery",
                                      "memory", "--spares", "1", DDP_TOY_TRAINER});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_TRUE(contains(r.output,
                       "--spares 1 with --nproc-per-node gpu (one worker per GPU): hot spares are "
                       "CPU-only"))
      << r.output;
}

}  // namespace
}  // namespace ddp::launch

// Note [A new host] in include/ddp/launch/node_rendezvous.hpp, under
// ddprun --recovery memory: three nodes of one toy-trainer worker each, and
// node 0 (the stores' host, and rank 0) SIGKILLed after a commit. The other
// two re-form at 2 ranks around node 1's standby; their workers keep their
// processes and continue from the commit in memory. Every sample of the
// epoch is trained once, and the final parameters are those of a job that
// lost nothing but continued at 2 ranks from the same step, from disk.

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <regex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ddp/launch/child_process.hpp"
#include "ddp/launch/port_reservation.hpp"
#include "elastic/recovery_job.hpp"
#include "launch/launcher_runs.hpp"

namespace ddp::launch {
namespace {

constexpr int kSamples = 2048;  // the toy trainer's epoch

std::vector<std::string> toy_trainer(const std::vector<std::string>& more) {
  std::vector<std::string> args = {DDP_TOY_TRAINER,
                                   "--epochs",
                                   "1",
                                   "--seed",
                                   "7",
                                   "--commit-every",
                                   std::to_string(kCommitEvery)};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// The batches of the "epoch 0 samples ..." lines of `text`, in order.
std::vector<std::vector<int>> batches_in(const std::string& text) {
  std::vector<std::vector<int>> batches;
  std::istringstream lines(text);
  const std::string marker = "] epoch 0 samples";
  for (std::string line; std::getline(lines, line);) {
    const auto at = line.find(marker);
    if (at == std::string::npos) continue;
    std::istringstream indices(line.substr(at + marker.size()));
    batches.emplace_back();
    for (int i = 0; indices >> i;) batches.back().push_back(i);
  }
  return batches;
}

// The part of `text` before the first `end` (all of it without one), or
// after the first `begin`.
std::string before(const std::string& text, const std::string& end) {
  return text.substr(0, text.find(end));
}
std::string after(const std::string& text, const std::string& begin) {
  const auto at = text.find(begin);
  return at == std::string::npos ? std::string() : text.substr(at);
}

TEST(ElasticHostLoss, TwoNodesOfThreeContinueFromMemoryAtTwoRanks) {
  const PortReservation reserved;
  const int port = reserved.port();
  std::vector<std::string> args = {"--nnodes",           "2:3",
                                   "--rdzv-backend",     "c10d",
                                   "--rdzv-endpoint",    "127.0.0.1:" + std::to_string(port),
                                   "--rdzv-id",          "hostloss",
                                   "--max-restarts",     "1",
                                   "--monitor-interval", "0.1",
                                   "--stop-grace",       "2",
                                   "--rdzv-conf",        "last_call_timeout=30",
                                   "--recovery",         "memory"};
  for (const auto& a : toy_trainer({"--trace-samples", "--step-delay-ms", "100"})) {
    args.push_back(a);
  }
  ChildProcess host(ddprun(args), false);
  wait_for_host(port);
  ChildProcess first(ddprun(args), false);
  ChildProcess second(ddprun(args), false);
  std::string host_output = output_until(host, "[0] committed step 8\n");
  ASSERT_TRUE(contains(host_output, "[0] committed step 8\n")) << host_output;
  host.signal_group(SIGKILL);  // its launcher (both stores) and rank 0
  host.reap_blocking();
  const ChildResult lost = finish(host, host_output);
  const ChildResult a = finish(first, "");
  const ChildResult b = finish(second, "");
  const bool a_hosts = contains(a.output, "; this node hosts it now at 127.0.0.1:");
  const ChildResult& new_host = a_hosts ? a : b;
  const ChildResult& other = a_hosts ? b : a;
  EXPECT_TRUE(contains(other.output, "; node 1's standby at 127.0.0.1:")) << other.output;

  // Both survivors kept their processes and continued from one commit.
  std::set<std::string> was;
  int commit = -1;
  for (const ChildResult* r : {&new_host, &other}) {
    ASSERT_EQ(r->exit_code, 0) << r->output;
    EXPECT_TRUE(contains(r->output,
                         "re-forming the job without it, this node's workers keeping "
                         "their state (recovery in memory, restart 1 of 1)"))
        << r->output;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r->output, m,
                                  std::regex(R"(re-formed at 2 ranks \(was rank (\d) of 3\))")))
        << r->output;
    was.insert(m[1].str());
    const std::regex pid(R"(\] pid (\d+))");
    std::vector<std::string> pids;
    for (auto it = std::sregex_iterator(r->output.begin(), r->output.end(), pid);
         it != std::sregex_iterator(); ++it) {
      pids.push_back((*it)[1].str());
    }
    ASSERT_EQ(pids.size(), 2u) << r->output;  // one per generation
    EXPECT_EQ(pids[0], pids[1]);
    EXPECT_FALSE(contains(r->output, "resumed at epoch")) << r->output;  // nothing from disk
    ASSERT_TRUE(
        std::regex_search(r->output, m, std::regex(R"(continuing from commit (\d+) of rank 0)")))
        << r->output;
    if (commit < 0) commit = std::stoi(m[1].str());
    EXPECT_EQ(std::stoi(m[1].str()), commit);
  }
  EXPECT_EQ(was, (std::set<std::string>{"1", "2"}));
  // The toy trainer commits at its start and after every 4th step.
  const int steps_kept = kCommitEvery * (commit - 1);
  ASSERT_GE(steps_kept, 8);

  // Every sample once: each of the 3 ranks' batches up to the commit, then
  // the 2 ranks' batches after it.
  std::multiset<int> seen;
  for (const ChildResult* r : {&lost, &new_host, &other}) {
    const auto kept = batches_in(before(r->output, "lost a peer"));
    ASSERT_GE(kept.size(), static_cast<size_t>(steps_kept)) << r->output;
    for (int step = 0; step < steps_kept; ++step) seen.insert(kept[step].begin(), kept[step].end());
    if (r == &lost) continue;
    for (const auto& batch : batches_in(after(r->output, "continuing from commit"))) {
      seen.insert(batch.begin(), batch.end());
    }
  }
  ASSERT_EQ(seen.size(), static_cast<size_t>(kSamples));
  for (int i = 0; i < kSamples; ++i) ASSERT_EQ(seen.count(i), 1u) << "sample " << i;

  // The reference: 3 ranks stop at that step with a snapshot, 2 resume it.
  const std::string dir =
      ::testing::TempDir() + "ddp_host_loss_reference_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::vector<std::string> stop = {"--standalone", "--nproc-per-node", "3"};
  for (const auto& x :
       toy_trainer({"--max-steps", std::to_string(steps_kept), "--snapshot-dir", dir})) {
    stop.push_back(x);
  }
  const ChildResult stopped = run_launcher(stop, std::chrono::seconds(120));
  ASSERT_EQ(stopped.exit_code, 0) << stopped.output;
  std::vector<std::string> resume = {"--standalone", "--nproc-per-node", "2"};
  for (const auto& x : toy_trainer({"--snapshot-dir", dir})) resume.push_back(x);
  const ChildResult resumed = run_launcher(resume, std::chrono::seconds(120));
  ASSERT_EQ(resumed.exit_code, 0) << resumed.output;
  ASSERT_TRUE(contains(resumed.output, "resumed at epoch 0, step " + std::to_string(steps_kept)))
      << resumed.output;
  std::vector<std::string> straight = {"--standalone", "--nproc-per-node", "3"};
  for (const auto& x : toy_trainer({})) straight.push_back(x);
  const ChildResult uninterrupted = run_launcher(straight, std::chrono::seconds(120));
  std::filesystem::remove_all(dir);
  EXPECT_NE(digest_of(new_host.output), "<none>") << new_host.output;
  EXPECT_EQ(digest_of(new_host.output), digest_of(resumed.output));
  // ... which the shrink made differ from an uninterrupted 3-rank job's.
  EXPECT_NE(digest_of(new_host.output), digest_of(uninterrupted.output));
}

}  // namespace
}  // namespace ddp::launch

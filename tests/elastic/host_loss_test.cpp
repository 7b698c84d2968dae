// Note [A new host] in include/ddp/launch/node_rendezvous.hpp, under
// ddprun --recovery memory: three nodes of one toy-trainer worker each, and
// one node SIGKILLed after a commit: node 0 (the stores' host, and rank 0),
// or node 2. The other two re-form at 2 ranks (around node 1's standby when
// the host was lost); their workers keep their processes and continue from
// the commit in memory. Every sample of the
// epoch is trained once, and the final parameters are those of a job that
// lost nothing but continued at 2 ranks from the same step, from disk.

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <filesystem>
#include <memory>
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

// What the three nodes printed: the lost one's, and the two survivors'.
struct Outputs {
  ChildResult lost;
  std::vector<ChildResult> survivors;
};

// Three nodes on loopback train the toy trainer under --recovery memory
// (and with `spare_node`, a fourth waits as a spare node); once node
// `lost_node` (0: the stores' host; 2: the last to join) has committed
// step 8, its launcher and worker are SIGKILLed.
Outputs lose_node(int lost_node, bool spare_node = false) {
  const PortReservation reserved;
  const int port = reserved.port();
  std::vector<std::string> args = {"--nnodes",           "2:3",
                                   "--rdzv-backend",     "c10d",
                                   "--rdzv-endpoint",    "127.0.0.1:" + std::to_string(port),
                                   "--rdzv-id",          "nodeloss",
                                   "--max-restarts",     "1",
                                   "--monitor-interval", "0.1",
                                   "--stop-grace",       "2",
                                   "--rdzv-conf",        "last_call_timeout=30",
                                   "--recovery",         "memory"};
  for (const auto& a : toy_trainer({"--trace-samples", "--step-delay-ms", "100"})) {
    args.push_back(a);
  }
  std::vector<std::unique_ptr<ChildProcess>> nodes;
  nodes.push_back(std::make_unique<ChildProcess>(ddprun(args), false));
  wait_for_host(port);
  nodes.push_back(std::make_unique<ChildProcess>(ddprun(args), false));
  nodes.push_back(std::make_unique<ChildProcess>(ddprun(args), false));
  std::string spare_output;
  if (spare_node) {
    output_until(*nodes[0], "] epoch 0 step 1 ");  // the job runs at its MAX of 3
    nodes.push_back(std::make_unique<ChildProcess>(ddprun(args), false));
    spare_output = output_until(*nodes[3], "waits as a spare node for round 1");
    EXPECT_TRUE(contains(spare_output, "waits as a spare node for round 1")) << spare_output;
  }
  // One worker per node: its rank is its node's rank.
  const std::string mark = "[" + std::to_string(lost_node) + "] committed step 8\n";
  std::vector<std::string> outputs(3);
  int lost = -1;
  for (int i = 0; i < 3 && lost < 0; ++i) {
    outputs[i] = output_until(*nodes[i], "] committed step 8\n");
    if (contains(outputs[i], mark)) lost = i;
  }
  EXPECT_GE(lost, 0) << outputs[0] << outputs[1] << outputs[2];
  Outputs result;
  if (lost < 0) return result;
  nodes[lost]->signal_group(SIGKILL);  // its launcher (with node 0: both stores) and worker
  nodes[lost]->reap_blocking();
  outputs.push_back(spare_output);
  for (size_t i = 0; i < nodes.size(); ++i) {
    ChildResult r = finish(*nodes[i], outputs[i]);
    if (static_cast<int>(i) == lost) {
      result.lost = std::move(r);
    } else {
      result.survivors.push_back(std::move(r));
    }
  }
  return result;
}

// The checks both losses share: the survivors kept their processes,
// re-formed at 2 ranks from one commit (returned), trained every sample
// once, and ended with the parameters of 3 ranks stopped at that commit's
// step and resumed at 2 from disk.
void expect_continued_in_memory(const Outputs& job, const std::set<std::string>& old_ranks) {
  ASSERT_EQ(job.survivors.size(), 2u);
  std::set<std::string> was;
  int commit = -1;
  for (const ChildResult& r : job.survivors) {
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_TRUE(contains(r.output,
                         "re-forming the job without it, this node's workers keeping "
                         "their state (recovery in memory, restart 1 of 1)"))
        << r.output;
    std::smatch m;
    ASSERT_TRUE(std::regex_search(r.output, m,
                                  std::regex(R"(re-formed at 2 ranks \(was rank (\d) of 3\))")))
        << r.output;
    was.insert(m[1].str());
    const std::regex pid(R"(\] pid (\d+))");
    std::vector<std::string> pids;
    for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), pid);
         it != std::sregex_iterator(); ++it) {
      pids.push_back((*it)[1].str());
    }
    ASSERT_EQ(pids.size(), 2u) << r.output;  // one per generation
    EXPECT_EQ(pids[0], pids[1]);
    EXPECT_FALSE(contains(r.output, "resumed at epoch")) << r.output;  // nothing from disk
    ASSERT_TRUE(
        std::regex_search(r.output, m, std::regex(R"(continuing from commit (\d+) of rank 0)")))
        << r.output;
    if (commit < 0) commit = std::stoi(m[1].str());
    EXPECT_EQ(std::stoi(m[1].str()), commit);
  }
  EXPECT_EQ(was, old_ranks);
  // The toy trainer commits at its start and after every 4th step.
  const int steps_kept = kCommitEvery * (commit - 1);
  ASSERT_GE(steps_kept, 8);

  // Every sample once: each of the 3 ranks' batches up to the commit, then
  // the 2 ranks' batches after it.
  std::multiset<int> seen;
  for (const ChildResult* r : {&job.lost, &job.survivors[0], &job.survivors[1]}) {
    const auto kept = batches_in(before(r->output, "lost a peer"));
    ASSERT_GE(kept.size(), static_cast<size_t>(steps_kept)) << r->output;
    for (int step = 0; step < steps_kept; ++step) seen.insert(kept[step].begin(), kept[step].end());
    if (r == &job.lost) continue;
    for (const auto& batch : batches_in(after(r->output, "continuing from commit"))) {
      seen.insert(batch.begin(), batch.end());
    }
  }
  ASSERT_EQ(seen.size(), static_cast<size_t>(kSamples));
  for (int i = 0; i < kSamples; ++i) ASSERT_EQ(seen.count(i), 1u) << "sample " << i;

  // The reference: 3 ranks stop at that step with a snapshot, 2 resume it.
  const std::string dir =
      ::testing::TempDir() + "ddp_node_loss_reference_" + std::to_string(::getpid());
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
  const std::string digest =
      digest_of(job.survivors[0].output + job.survivors[1].output);  // new rank 0's
  EXPECT_NE(digest, "<none>");
  EXPECT_EQ(digest, digest_of(resumed.output));
  // ... which the shrink made differ from an uninterrupted 3-rank job's.
  EXPECT_NE(digest, digest_of(uninterrupted.output));
}

TEST(ElasticHostLoss, TwoNodesOfThreeContinueFromMemoryAtTwoRanks) {
  const Outputs job = lose_node(0);
  ASSERT_EQ(job.survivors.size(), 2u);
  const bool first_hosts =
      contains(job.survivors[0].output, "; this node hosts it now at 127.0.0.1:");
  const ChildResult& new_host = job.survivors[first_hosts ? 0 : 1];
  const ChildResult& other = job.survivors[first_hosts ? 1 : 0];
  EXPECT_TRUE(contains(new_host.output, "; this node hosts it now at 127.0.0.1:"))
      << new_host.output;
  EXPECT_TRUE(contains(other.output, "; node 1's standby at 127.0.0.1:")) << other.output;
  expect_continued_in_memory(job, {"1", "2"});
}

// Point 3 of the issue: a membership change (a node other than the host
// lost) re-forms from the commit in memory too, not from disk.
TEST(ElasticNodeLoss, TwoNodesOfThreeContinueFromMemoryAtTwoRanks) {
  const Outputs job = lose_node(2);
  for (const ChildResult& r : job.survivors) {
    EXPECT_TRUE(contains(r.output, "ddprun: node 2 stopped its heartbeat ")) << r.output;
  }
  expect_continued_in_memory(job, {"0", "1"});
}

// A spare node waiting at the job's MAX takes the lost node's place: the
// other two keep their workers, the spare node's worker receives the
// commit, and the job ends as if nothing had been lost (3 ranks again).
TEST(ElasticNodeLoss, ASpareNodeTakesTheLostNodesPlaceInMemory) {
  const Outputs job = lose_node(2, /*spare_node=*/true);
  ASSERT_EQ(job.survivors.size(), 3u);
  std::string all;
  for (const ChildResult& r : job.survivors) {
    EXPECT_EQ(r.exit_code, 0) << r.output;
    all += r.output;
  }
  EXPECT_EQ(count(all,
                  "re-forming the job without it, this node's workers keeping their state "
                  "(recovery in memory, restart 1 of 1)"),
            2)
      << all;
  EXPECT_EQ(count(all, "re-formed at 3 ranks (was rank "), 2) << all;
  EXPECT_EQ(count(all, ": generation 1: continuing from commit 3 of rank 0"), 3) << all;
  EXPECT_FALSE(contains(all, "resumed at epoch")) << all;
  std::vector<std::string> straight = {"--standalone", "--nproc-per-node", "3"};
  for (const auto& x : toy_trainer({})) straight.push_back(x);
  const ChildResult uninterrupted = run_launcher(straight, std::chrono::seconds(120));
  EXPECT_NE(digest_of(all), "<none>");
  EXPECT_EQ(digest_of(all), digest_of(uninterrupted.output));
}

}  // namespace
}  // namespace ddp::launch

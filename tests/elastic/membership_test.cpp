// Membership changes under ddprun --recovery memory, on loopback nodes of
// one toy-trainer worker each, with the workers keeping their processes and
// continuing from the commit in memory, at the new size:
// - Note [A new host] in src/launch/node_rendezvous.hpp: of three
//   nodes, one is SIGKILLed after a commit: node 0 (the stores' host, and
//   rank 0), or node 2. The other two re-form at 2 ranks (around node 1's
//   standby when the host was lost).
// - Note [A node joins in memory] in include/ddp/elastic/run.hpp: a third
//   node joins two that train, which take it in at their next commit.
// Every sample of the epoch is trained once, and the final parameters are
// those of a job that continued at the new size from the same step, from
// disk.

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
#include "elastic/sample_accounting.hpp"
#include "launch/launcher_runs.hpp"

namespace ddp::launch {
namespace {

constexpr int kSamples = 2048;  // the toy trainer's epoch
constexpr int kBatchSize = 32;  // and its batch, per rank

std::vector<std::string> toy_trainer(const std::vector<std::string>& more,
                                     int commit_every = kCommitEvery) {
  std::vector<std::string> args = {DDP_TOY_TRAINER,
                                   "--epochs",
                                   "1",
                                   "--seed",
                                   "7",
                                   "--commit-every",
                                   std::to_string(commit_every)};
  args.insert(args.end(), more.begin(), more.end());
  return args;
}

// The part of `text` after the first `begin`.
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
// (and with `spare_node`, a fourth waits as a spare node; with `spares`,
// every node keeps that many hot spares); once node `lost_node` (0: the
// stores' host; 2: the last to join) has committed step 8, its launcher and
// worker are SIGKILLed, or with SIGSTOP stopped until the others are done
// (a hang, or a partition: no connection closes), then continued. The
// workers log their samples to `evidence`, which keeps the nodes' outputs
// too.
Outputs lose_node(const EvidenceDirectory& evidence, int lost_node, bool spare_node = false,
                  int spares = 0, int signal = SIGKILL) {
  const PortReservation reserved;
  const int port = reserved.port();
  std::vector<std::string> args = {
      "--nnodes",           "2:3",
      "--rdzv-backend",     "c10d",
      "--rdzv-endpoint",    "127.0.0.1:" + std::to_string(port),
      "--rdzv-id",          "nodeloss",
      "--max-restarts",     "1",
      "--monitor-interval", "0.1",
      "--stop-grace",       "2",
      "--rdzv-conf",        signal == SIGSTOP ? "last_call_timeout=10" : "last_call_timeout=30",
      "--recovery",         "memory",
      "--spares",           std::to_string(spares)};
  // A stopped peer is noticed by the collective timeout only.
  for (const auto& a :
       toy_trainer({"--sample-log", evidence.path().string(), "--trace-samples", "--step-delay-ms",
                    "100", "--collective-timeout", signal == SIGSTOP ? "5" : "1800"})) {
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
  nodes[lost]->signal_group(signal);  // its launcher (with node 0: both stores) and worker
  if (signal == SIGKILL) nodes[lost]->reap_blocking();
  outputs.push_back(spare_output);
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (static_cast<int>(i) != lost) result.survivors.push_back(finish(*nodes[i], outputs[i]));
  }
  if (signal == SIGSTOP) nodes[lost]->signal_group(SIGCONT);
  result.lost = finish(*nodes[lost], outputs[lost]);
  evidence.keep("lost-node.out", result.lost.output);
  for (size_t i = 0; i < result.survivors.size(); ++i) {
    evidence.keep("survivor-" + std::to_string(i) + ".out", result.survivors[i].output);
  }
  return result;
}

// The toy trainer's final digest (with `more` arguments) when `ranks` ranks
// train the epoch.
std::string digest_uninterrupted(int ranks, const std::vector<std::string>& more = {}) {
  std::vector<std::string> straight = {"--standalone", "--nproc-per-node", std::to_string(ranks)};
  for (const auto& x : toy_trainer(more)) straight.push_back(x);
  const ChildResult r = run_launcher(straight, std::chrono::seconds(120));
  EXPECT_EQ(r.exit_code, 0) << r.output;
  return digest_of(r.output);
}

// The reference of a re-formed job: `ranks` ranks stop after `steps` steps
// with a snapshot, and `then` ranks resume it from disk; their final digest.
std::string digest_resumed(int ranks, int steps, int then,
                           const std::vector<std::string>& more = {}) {
  const std::string dir =
      ::testing::TempDir() + "ddp_membership_reference_" + std::to_string(::getpid());
  std::filesystem::remove_all(dir);
  std::vector<std::string> stop = {"--standalone", "--nproc-per-node", std::to_string(ranks)};
  std::vector<std::string> stopping = {"--max-steps", std::to_string(steps), "--snapshot-dir", dir};
  stopping.insert(stopping.end(), more.begin(), more.end());
  for (const auto& x : toy_trainer(stopping)) stop.push_back(x);
  const ChildResult stopped = run_launcher(stop, std::chrono::seconds(120));
  EXPECT_EQ(stopped.exit_code, 0) << stopped.output;
  std::vector<std::string> resume = {"--standalone", "--nproc-per-node", std::to_string(then)};
  std::vector<std::string> resuming = {"--snapshot-dir", dir};
  resuming.insert(resuming.end(), more.begin(), more.end());
  for (const auto& x : toy_trainer(resuming)) resume.push_back(x);
  const ChildResult resumed = run_launcher(resume, std::chrono::seconds(120));
  std::filesystem::remove_all(dir);
  EXPECT_EQ(resumed.exit_code, 0) << resumed.output;
  EXPECT_TRUE(contains(resumed.output, "resumed at epoch 0, step " + std::to_string(steps)))
      << resumed.output;
  return digest_of(resumed.output);
}

// One worker's output by generation: the process id its training function
// printed as the generation began ("pid N", on stdout as the batches are),
// and the text that followed, up to the next.
std::vector<std::pair<std::string, std::string>> generations_in(const std::string& text) {
  std::vector<std::pair<std::string, std::string>> generations;
  std::vector<size_t> starts;
  const std::regex pid(R"(\] pid (\d+)\n)");
  for (auto it = std::sregex_iterator(text.begin(), text.end(), pid); it != std::sregex_iterator();
       ++it) {
    starts.push_back(static_cast<size_t>(it->position(0)));
    generations.emplace_back((*it)[1].str(), "");
  }
  starts.push_back(text.size());
  for (size_t g = 0; g < generations.size(); ++g) {
    generations[g].second = text.substr(starts[g], starts[g + 1] - starts[g]);
  }
  return generations;
}

// The checks both losses share: the survivors kept their processes,
// re-formed at 2 ranks from one commit (returned), trained every sample
// once (by the logs in `evidence`), and ended with the parameters of 3
// ranks stopped at that commit's
// step and resumed at 2 from disk.
void expect_continued_in_memory(const Outputs& job, const std::set<std::string>& old_ranks,
                                const EvidenceDirectory& evidence) {
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
    const auto generations = generations_in(r.output);
    ASSERT_EQ(generations.size(), 2u) << r.output;  // one per generation
    EXPECT_EQ(generations[0].first, generations[1].first);
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

  // Every sample once, from the workers' own logs (Note [Accounting for
  // every sample]): 3 ranks up to the commit, then the survivors, the same
  // processes, at 2 ranks.
  const SampleAccount account(evidence.path(), SampleSchedule{kSamples, kBatchSize, 7});
  ASSERT_EQ(account.generations().size(), 2u) << account.report();
  const JobGeneration& first = account.generations()[0];
  const JobGeneration& second = account.generations()[1];
  EXPECT_EQ(first.world, 3) << account.report();
  EXPECT_EQ(first.from_step, 0) << account.report();
  EXPECT_EQ(second.world, 2) << account.report();
  EXPECT_EQ(second.from_step, steps_kept) << account.report();
  std::set<int> survivor_pids, continued_pids;
  for (const ChildResult& r : job.survivors)
    survivor_pids.insert(std::stoi(generations_in(r.output)[0].first));
  for (const auto& [rank, part] : second.ranks) continued_pids.insert(part.pid);
  EXPECT_EQ(continued_pids, survivor_pids) << account.report();
  EXPECT_TRUE(account.problems().empty()) << account.report();

  const std::string digest =
      digest_of(job.survivors[0].output + job.survivors[1].output);  // new rank 0's
  EXPECT_NE(digest, "<none>");
  EXPECT_EQ(digest, digest_resumed(3, steps_kept, 2));
  // ... which the shrink made differ from an uninterrupted 3-rank job's.
  EXPECT_NE(digest, digest_uninterrupted(3));
}

// With a hot spare per node (Note [A spare waits for a seat]), refilled
// after the take-over.
TEST(ElasticHostLoss, TwoNodesOfThreeContinueFromMemoryAtTwoRanks) {
  const EvidenceDirectory evidence("host-loss");
  const Outputs job = lose_node(evidence, 0, /*spare_node=*/false, /*spares=*/1);
  ASSERT_EQ(job.survivors.size(), 2u);
  const bool first_hosts =
      contains(job.survivors[0].output, "; this node hosts it now at 127.0.0.1:");
  const ChildResult& new_host = job.survivors[first_hosts ? 0 : 1];
  const ChildResult& other = job.survivors[first_hosts ? 1 : 0];
  EXPECT_TRUE(contains(new_host.output, "; this node hosts it now at 127.0.0.1:"))
      << new_host.output;
  EXPECT_TRUE(contains(other.output, "; node 1's standby at 127.0.0.1:")) << other.output;
  // The lost store is named as the agents' (not as rank 0's), and each
  // survivor starts a hot spare again in the new recovery store: the first
  // waited in the lost one.
  for (const ChildResult* r : {&new_host, &other}) {
    EXPECT_TRUE(contains(r->output,
                         "Node 0's ddprun, which hosts the store, has probably exited or crashed, "
                         "or the network failed; check its log; "))
        << r->output;
    EXPECT_EQ(count(r->output, "ddprun: started spare "), 2) << r->output;
    std::smatch m;
    const std::string later = after(r->output, "re-forming the job without it");
    ASSERT_TRUE(std::regex_search(later, m, std::regex(R"(ddprun: started spare (\w+) \(pid)")))
        << r->output;
    EXPECT_TRUE(std::regex_search(
        later, std::regex("spare " + m[1].str() + R"( \(pid \d+\) ready after \d+ ms)")))
        << r->output;
  }
  expect_continued_in_memory(job, {"1", "2"}, evidence);
}

// Note [A new host]: node 0 hangs (SIGSTOP: its connections stay open, as
// in a partition). The other two find its store silent after the store's
// reply bound (agents: node_timeout; workers, once their collective timed
// out: 5 s), re-form around node 1's standby and continue in memory.
// Node 0, continued once they are done, refuses to run the job again alone.
TEST(ElasticHostLoss, AHungHostIsLeftBehindInMemoryAndThenRefusesToRunAlone) {
  const auto stopped = std::chrono::steady_clock::now();
  const EvidenceDirectory evidence("hung-host");
  const Outputs job = lose_node(evidence, 0, /*spare_node=*/false, /*spares=*/0, SIGSTOP);
  ASSERT_EQ(job.survivors.size(), 2u);
  EXPECT_LT(std::chrono::steady_clock::now() - stopped, std::chrono::seconds(150));
  for (const ChildResult& r : job.survivors) {
    EXPECT_TRUE(contains(r.output, " (node 0): lost the connection to the rendezvous store at "))
        << r.output;
    EXPECT_TRUE(contains(r.output, "lost a peer: ")) << r.output;
  }
  EXPECT_EQ(job.lost.exit_code, 4) << job.lost.output;
  EXPECT_TRUE(contains(job.lost.output, "only 1 of the 3 node(s) of round 0 came back"))
      << job.lost.output;
  expect_continued_in_memory(job, {"1", "2"}, evidence);
}

// Point 3 of the issue: a membership change (a node other than the host
// lost) re-forms from the commit in memory too, not from disk.
TEST(ElasticNodeLoss, TwoNodesOfThreeContinueFromMemoryAtTwoRanks) {
  const EvidenceDirectory evidence("node-loss");
  const Outputs job = lose_node(evidence, 2);
  for (const ChildResult& r : job.survivors) {
    EXPECT_TRUE(contains(r.output, "ddprun: node 2 stopped its heartbeat ")) << r.output;
  }
  expect_continued_in_memory(job, {"0", "1"}, evidence);
}

// A spare node waiting at the job's MAX takes the lost node's place: the
// other two keep their workers, the spare node's worker receives the
// commit, and the job ends as if nothing had been lost (3 ranks again).
TEST(ElasticNodeLoss, ASpareNodeTakesTheLostNodesPlaceInMemory) {
  const EvidenceDirectory evidence("spare-node");
  const Outputs job = lose_node(evidence, 2, /*spare_node=*/true);
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
  // The commit of step 8 or, where the kill came later (a loaded machine
  // relays the lost node's output late), a later one: the same on all three.
  std::smatch m;
  ASSERT_TRUE(std::regex_search(
      all, m, std::regex(R"(: generation 1: continuing from commit (\d+) of rank 0)")))
      << all;
  const int commit = std::stoi(m[1].str());
  EXPECT_GE(commit, 3);
  EXPECT_EQ(count(all, ": generation 1: continuing from commit " + m[1].str() + " of rank 0"), 3)
      << all;
  EXPECT_FALSE(contains(all, "resumed at epoch")) << all;
  const SampleAccount account(evidence.path(), SampleSchedule{kSamples, kBatchSize, 7});
  ASSERT_EQ(account.generations().size(), 2u) << account.report();
  EXPECT_EQ(account.generations()[1].world, 3) << account.report();
  EXPECT_EQ(account.generations()[1].from_step, kCommitEvery * (commit - 1)) << account.report();
  EXPECT_TRUE(account.problems().empty()) << account.report();
  std::vector<std::string> straight = {"--standalone", "--nproc-per-node", "3"};
  for (const auto& x : toy_trainer({})) straight.push_back(x);
  const ChildResult uninterrupted = run_launcher(straight, std::chrono::seconds(120));
  EXPECT_NE(digest_of(all), "<none>");
  EXPECT_EQ(digest_of(all), digest_of(uninterrupted.output));
}

// Two nodes train the toy trainer with `trainer_args`, committing every
// `commit_every` steps under --recovery memory (--nnodes 2:3); once the first node printed `mark`,
// a third starts. What the three printed, and all of it.
std::vector<ChildResult> join_third_node(const EvidenceDirectory& evidence,
                                         const std::vector<std::string>& trainer_args,
                                         int commit_every, const std::string& mark,
                                         std::string& all) {
  const PortReservation reserved;
  const int port = reserved.port();
  std::vector<std::string> args = {"--nnodes",           "2:3",
                                   "--rdzv-backend",     "c10d",
                                   "--rdzv-endpoint",    "127.0.0.1:" + std::to_string(port),
                                   "--rdzv-id",          "nodearrival",
                                   "--max-restarts",     "1",
                                   "--monitor-interval", "0.1",
                                   "--stop-grace",       "2",
                                   "--rdzv-conf",        "last_call_timeout=1",
                                   "--recovery",         "memory"};
  std::vector<std::string> trainer = {"--sample-log", evidence.path().string()};
  trainer.insert(trainer.end(), trainer_args.begin(), trainer_args.end());
  for (const auto& a : toy_trainer(trainer, commit_every)) args.push_back(a);
  std::vector<std::unique_ptr<ChildProcess>> nodes;
  nodes.push_back(std::make_unique<ChildProcess>(ddprun(args), false));
  wait_for_host(port);
  nodes.push_back(std::make_unique<ChildProcess>(ddprun(args), false));
  std::vector<std::string> outputs(3);
  outputs[0] = output_until(*nodes[0], mark);
  EXPECT_TRUE(contains(outputs[0], mark)) << outputs[0];
  nodes.push_back(std::make_unique<ChildProcess>(ddprun(args), false));
  std::vector<ChildResult> results;
  for (size_t i = 0; i < nodes.size(); ++i) {
    results.push_back(finish(*nodes[i], outputs[i]));
    all += results.back().output;
    evidence.keep("node-" + std::to_string(i) + ".out", results.back().output);
  }
  return results;
}

// The toy trainer's arguments for an optimizer: plain SGD (0), or sharded
// by ZeRO stage 1 or 2 (with momentum, so that the shards hold state).
std::vector<std::string> optimizer_args(int zero_stage) {
  if (zero_stage == 0) return {};
  return {"--zero-stage", std::to_string(zero_stage), "--momentum", "0.9"};
}

// Note [A node joins in memory]: two nodes train; once rank 0 has committed
// step 8, a third node starts. The two keep their workers, which take it
// in at their next commit and hand that commit to its worker (with ZeRO,
// every rank receives every old shard and cuts its new one out of them).
class ElasticNodeArrival : public ::testing::TestWithParam<int> {};

TEST_P(ElasticNodeArrival, AThirdNodeIsTakenInAtTheNextCommitFromMemory) {
  const std::vector<std::string> optimizer = optimizer_args(GetParam());
  std::vector<std::string> trainer = {"--trace-samples", "--step-delay-ms", "200"};
  trainer.insert(trainer.end(), optimizer.begin(), optimizer.end());
  std::string all;
  const EvidenceDirectory evidence("node-arrival");
  const std::vector<ChildResult> results =
      join_third_node(evidence, trainer, kCommitEvery, "[0] committed step 8\n", all);
  std::smatch m;
  ASSERT_TRUE(std::regex_search(all, m, std::regex(R"(continuing from commit (\d+) of rank 0)")))
      << all;
  const int commit = std::stoi(m[1].str());
  EXPECT_EQ(count(all, "] ddp: rank 2: generation 1: continuing from commit " +
                           std::to_string(commit) + " of rank 0"),
            1)
      << all;
  EXPECT_EQ(
      count(all, "generation 1: continuing from commit " + std::to_string(commit) + " of rank 0"),
      3)
      << all;
  // The toy trainer commits at its start and after every 4th step; the
  // third node started after commit 3.
  const int steps_kept = kCommitEvery * (commit - 1);
  ASSERT_GE(steps_kept, 12);

  std::set<std::string> was;
  for (size_t i = 0; i < results.size(); ++i) {
    const ChildResult& r = results[i];
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_FALSE(contains(r.output, "lost a peer")) << r.output;
    EXPECT_FALSE(contains(r.output, "resumed at epoch")) << r.output;  // nothing from disk
    const auto generations = generations_in(r.output);
    if (i == 2) {  // the new node: one generation, from the commit
      ASSERT_EQ(generations.size(), 1u) << r.output;
      EXPECT_FALSE(contains(r.output, "re-formed at")) << r.output;
    } else {  // the same process in both generations, re-formed at 3 ranks
      EXPECT_TRUE(contains(r.output,
                           "a node is waiting to join the job of 2 node(s); re-forming it in "
                           "rendezvous round 1, this node's workers keeping their state "
                           "(recovery in memory"))
          << r.output;
      EXPECT_TRUE(contains(r.output,
                           "ddprun started generation 1 (the job re-formed) while "
                           "generation 0 trained; it continues from commit " +
                               std::to_string(commit)))
          << r.output;
      ASSERT_TRUE(std::regex_search(r.output, m,
                                    std::regex(R"(re-formed at 3 ranks \(was rank (\d) of 2\))")))
          << r.output;
      was.insert(m[1].str());
      ASSERT_EQ(generations.size(), 2u) << r.output;
      EXPECT_EQ(generations[0].first, generations[1].first);
    }
  }
  EXPECT_EQ(was, (std::set<std::string>{"0", "1"}));
  // Every sample once (Note [Accounting for every sample]), but for the
  // padding that evens out the rest of the epoch over 3 ranks
  // (DistributedSampler repeats its first indices).
  const SampleAccount account(evidence.path(), SampleSchedule{kSamples, kBatchSize, 7});
  ASSERT_EQ(account.generations().size(), 2u) << account.report();
  EXPECT_EQ(account.generations()[0].world, 2) << account.report();
  EXPECT_EQ(account.generations()[1].world, 3) << account.report();
  EXPECT_EQ(account.generations()[1].from_step, steps_kept) << account.report();
  EXPECT_TRUE(account.problems().empty()) << account.report();
  const int rest = kSamples - steps_kept * 2 * kBatchSize;
  EXPECT_EQ(account.repeated(), (3 - rest % 3) % 3) << account.report();

  const std::string digest = digest_of(all);  // rank 0's, on the first node
  EXPECT_NE(digest, "<none>");
  EXPECT_EQ(digest, digest_resumed(2, steps_kept, 3, optimizer));
  EXPECT_NE(digest, digest_uninterrupted(2, optimizer));
}

INSTANTIATE_TEST_SUITE_P(Optimizers, ElasticNodeArrival, ::testing::Values(0, 2),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == 0 ? std::string("Sgd")
                                                  : "ZeroStage" + std::to_string(info.param);
                         });

// A job that commits only at its start never takes the new node in: its
// worker, started in generation 1, finds the training ended and ends with
// exit 0, and the job ends as if no node had come.
TEST(ElasticLateNodeArrival, ANodeThatJoinsAfterTheLastCommitHasNothingToTrain) {
  std::string all;
  const EvidenceDirectory evidence("late-node");
  const std::vector<ChildResult> results = join_third_node(
      evidence, {"--step-delay-ms", "100"}, /*commit_every=*/1000, "[0] epoch 0 step 8 ", all);
  for (const ChildResult& r : results) EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(results[2].output,
                       "] ddp: rank 1: the job's training ended before generation 1 met; this "
                       "worker has nothing to train and ends"))
      << results[2].output;
  EXPECT_FALSE(contains(all, "continuing from commit")) << all;
  EXPECT_EQ(count(all, "] pid "), 2) << all;  // the two first workers', once each
  EXPECT_EQ(digest_of(all), digest_uninterrupted(2));
}

}  // namespace
}  // namespace ddp::launch

// Membership changes under ddprun's c10d rendezvous (Note [How nodes
// meet] in src/launch/node_rendezvous.hpp): a node that arrives at a
// running job re-forms it at the new size, and a node lost for good leaves
// the job running on the others while --nnodes MIN remain.

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <memory>
#include <thread>
#include <vector>

#include "ddp/launch/child_process.hpp"
#include "ddp/launch/port_reservation.hpp"
#include "launch/launcher_runs.hpp"

namespace ddp::launch {
namespace {

using namespace std::chrono_literals;

// A node that arrives while a job of 1 of
// 1:2 nodes runs makes it re-form with 2, its ranks reassigned, no restart
// counted.
TEST(LauncherMembership, NodeArrivingAtARunningJobReformsItWithBoth) {
  const PortReservation reserved;
  const std::string endpoint = "127.0.0.1:" + std::to_string(reserved.port());
  const ChildSpec node = ddprun({"--nnodes", "1:2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                                 endpoint, "--rdzv-id", "grow", "--monitor-interval", "0.1",
                                 "--rdzv-conf", "last_call_timeout=1", DDP_LAUNCH_WORKER, "grow"});
  ChildProcess first(node, false);
  std::string first_output = output_until(first, "] waiting in round 0");
  ASSERT_TRUE(contains(first_output, "[0] waiting in round 0")) << first_output;
  ChildProcess second(node, false);
  const ChildResult joined = finish(second, "");
  const ChildResult running = finish(first, first_output);
  for (const ChildResult* r : {&running, &joined}) {
    EXPECT_EQ(r->exit_code, 0) << r->output;
    for (const char* line :
         {"] DDP_RENDEZVOUS_ROUND=1\n", "] WORLD_SIZE=2\n", "] GROUP_WORLD_SIZE=2\n",
          "] TORCHELASTIC_RESTART_COUNT=0\n", "] attempt 0: sum of ranks 1"}) {
      EXPECT_TRUE(contains(r->output, line)) << line << " missing in\n" << r->output;
    }
  }
  EXPECT_TRUE(contains(running.output, "[0] GROUP_RANK=0")) << running.output;
  EXPECT_TRUE(contains(joined.output, "[1] GROUP_RANK=1")) << joined.output;
  EXPECT_TRUE(contains(running.output,
                       "ddprun: a node is waiting to join the job of 1 node(s); stopping every "
                       "worker to re-form it (rendezvous round 1; no restart counted)"))
      << running.output;
}

// A node lost for good (its launcher SIGKILLed, its workers with it) no
// longer fails a job of 1:2 nodes: the survivor restarts alone.
TEST(LauncherMembership, LostNodeLeavesTheJobRunningOnTheOther) {
  const PortReservation reserved;
  const int port = reserved.port();
  const ChildSpec node = ddprun({"--nnodes", "1:2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                                 "127.0.0.1:" + std::to_string(port), "--rdzv-id", "shrink",
                                 "--max-restarts", "1", "--monitor-interval", "0.1", "--rdzv-conf",
                                 "last_call_timeout=8", DDP_LAUNCH_WORKER, "shrink"});
  ChildProcess host(node, false);
  // The second node starts once the first hosts the rendezvous.
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (!host_listens(port) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(20ms);
  }
  ChildProcess lost(node, false);
  std::string lost_output = output_until(lost, "] round 0: all-reduced over 2");
  ASSERT_TRUE(contains(lost_output, "round 0: all-reduced over 2")) << lost_output;
  lost.signal_group(SIGKILL);  // the launcher and its worker
  lost.reap_blocking();
  const ChildResult survivor = finish(host, "");
  EXPECT_EQ(survivor.exit_code, 0) << survivor.output;
  for (const char* line :
       {"restarting every worker (restart 1 of 1)", "[0] DDP_RENDEZVOUS_ROUND=1\n",
        "[0] WORLD_SIZE=1\n", "[0] GROUP_WORLD_SIZE=1\n", "[0] TORCHELASTIC_RESTART_COUNT=1\n",
        "[0] attempt 1: sum of ranks 0"}) {
    EXPECT_TRUE(contains(survivor.output, line)) << line << " missing in\n" << survivor.output;
  }
}

// A node that arrives at a job running at its --nnodes MAX says that it
// waits as a spare node; when nothing frees a place within its
// join_timeout it ends with a RendezvousError naming that, and the job
// itself runs on undisturbed.
TEST(LauncherMembership, SpareNodeAtMaxSaysSoAndGivesUpAfterJoinTimeout) {
  const PortReservation reserved;
  const int port = reserved.port();
  const std::vector<std::string> common = {
      "--nnodes",           "1:2",
      "--rdzv-backend",     "c10d",
      "--rdzv-endpoint",    "127.0.0.1:" + std::to_string(port),
      "--rdzv-id",          "full",
      "--monitor-interval", "0.1"};
  auto node_args = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = common;
    args.insert(args.end(), extra.begin(), extra.end());
    for (const char* a : {DDP_LAUNCH_WORKER, "linger", "20"}) args.push_back(a);
    return ddprun(args);
  };
  ChildProcess host(node_args({}), false);
  wait_for_host(port);
  ChildProcess second(node_args({}), false);
  std::string second_output = output_until(second, "] attempt 0: sum of ranks 1");
  ASSERT_TRUE(contains(second_output, "[1] attempt 0: sum of ranks 1")) << second_output;
  ChildProcess spare(node_args({"--rdzv-conf", "join_timeout=3"}), false);
  const ChildResult refused = finish(spare, "", 60s);
  EXPECT_EQ(refused.exit_code, 4) << refused.output;  // RendezvousError
  EXPECT_TRUE(contains(refused.output,
                       "ddprun: the job 'full' runs at its --nnodes MAX of 2 nodes; this node "
                       "waits as a spare node for round 1"))
      << refused.output;
  EXPECT_TRUE(contains(refused.output,
                       "ddprun: error: this node waited as a spare node of the job 'full' at "))
      << refused.output;
  const ChildResult job = finish(host, "");
  const ChildResult other = finish(second, second_output);
  EXPECT_EQ(job.exit_code, 0) << job.output;
  EXPECT_EQ(other.exit_code, 0) << other.output;
  EXPECT_EQ(count(job.output, "re-form"), 0) << job.output;
}

// A spare node takes the place of a node that is lost: the job re-forms
// with it after the failure and finishes.
TEST(LauncherMembership, SpareNodeReplacesALostNode) {
  const PortReservation reserved;
  const int port = reserved.port();
  const ChildSpec node = ddprun({"--nnodes", "1:2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                                 "127.0.0.1:" + std::to_string(port), "--rdzv-id", "replace",
                                 "--max-restarts", "1", "--monitor-interval", "0.1", "--rdzv-conf",
                                 "last_call_timeout=30", DDP_LAUNCH_WORKER, "shrink"});
  ChildProcess host(node, false);
  wait_for_host(port);
  ChildProcess lost(node, false);
  std::string lost_output = output_until(lost, "] round 0: all-reduced over 2");
  ASSERT_TRUE(contains(lost_output, "round 0: all-reduced over 2")) << lost_output;
  ChildProcess spare(node, false);
  std::string spare_output = output_until(spare, "waits as a spare node");
  ASSERT_TRUE(contains(spare_output, "waits as a spare node for round 1")) << spare_output;
  lost.signal_group(SIGKILL);  // the launcher and its worker
  lost.reap_blocking();
  const ChildResult survivor = finish(host, "");
  const ChildResult replacement = finish(spare, spare_output);
  EXPECT_EQ(survivor.exit_code, 0) << survivor.output;
  EXPECT_EQ(replacement.exit_code, 0) << replacement.output;
  for (const ChildResult* r : {&survivor, &replacement}) {
    for (const char* line : {"] DDP_RENDEZVOUS_ROUND=1\n", "] WORLD_SIZE=2\n",
                             "] GROUP_WORLD_SIZE=2\n", ": sum of ranks 1"}) {
      EXPECT_TRUE(contains(r->output, line)) << line << " missing in\n" << r->output;
    }
  }
  // Restarts are counted by each agent, as torchrun's are: the spare node
  // has had none.
  EXPECT_TRUE(contains(survivor.output, "[0] attempt 1: sum of ranks 1")) << survivor.output;
  EXPECT_TRUE(contains(replacement.output, "[1] GROUP_RANK=1")) << replacement.output;
  EXPECT_TRUE(contains(replacement.output, "[1] attempt 0: sum of ranks 1")) << replacement.output;
}

// Three ddprun nodes (--nnodes `nnodes`, c10d at `port`, run `id`, one
// "shrink" worker each, which all-reduces until a peer is lost): the host
// first, then two others. Returns once the host's rank 0 has all-reduced
// over three (or the wait gave up), with what the host printed so far in
// `host_output`.
struct ThreeNodes {
  std::unique_ptr<ChildProcess> host, first, second;
  std::string host_output;
};
ThreeNodes three_shrinking_nodes(const std::string& nnodes, int port, const std::string& id,
                                 const std::string& last_call_timeout) {
  const ChildSpec node =
      ddprun({"--nnodes", nnodes, "--rdzv-backend", "c10d", "--rdzv-endpoint",
              "127.0.0.1:" + std::to_string(port), "--rdzv-id", id, "--max-restarts", "1",
              "--monitor-interval", "0.1", "--rdzv-conf", "last_call_timeout=" + last_call_timeout,
              DDP_LAUNCH_WORKER, "shrink"});
  ThreeNodes nodes;
  nodes.host = std::make_unique<ChildProcess>(node, false);
  wait_for_host(port);
  nodes.first = std::make_unique<ChildProcess>(node, false);
  nodes.second = std::make_unique<ChildProcess>(node, false);
  nodes.host_output = output_until(*nodes.host, "] round 0: all-reduced over 3");
  return nodes;
}

// Note [A new host] in src/launch/node_rendezvous.hpp: the node
// hosting the store is lost (its launcher SIGKILLed, its worker with it);
// the other two of a job of 2:3 nodes re-form around node 1's standby, at
// the cost of one restart, and finish.
TEST(LauncherSuccession, HostLostTheOtherTwoReformAroundAStandby) {
  const PortReservation reserved;
  const int port = reserved.port();
  ThreeNodes nodes = three_shrinking_nodes("2:3", port, "succession", "30");
  ASSERT_TRUE(contains(nodes.host_output, "[0] round 0: all-reduced over 3")) << nodes.host_output;
  ChildProcess& host = *nodes.host;
  ChildProcess& first = *nodes.first;
  ChildProcess& second = *nodes.second;
  host.signal_group(SIGKILL);  // the launcher, the store and rank 0
  host.reap_blocking();
  const ChildResult a = finish(first, "");
  const ChildResult b = finish(second, "");
  const bool a_hosts = contains(a.output, "; this node hosts it now at 127.0.0.1:");
  const ChildResult& new_host = a_hosts ? a : b;
  const ChildResult& other = a_hosts ? b : a;
  const std::string lost =
      "ddprun: lost the rendezvous store at 127.0.0.1:" + std::to_string(port) + " (node 0): ";
  for (const ChildResult* r : {&new_host, &other}) {
    EXPECT_EQ(r->exit_code, 0) << r->output;
    for (const std::string& line :
         {lost, std::string("(take-over 1, after round 0)"),
          std::string("the node hosting the rendezvous store was lost; restarting every worker "
                      "(restart 1 of 1)"),
          std::string("] DDP_RENDEZVOUS_ROUND=1\n"), std::string("] WORLD_SIZE=2\n"),
          std::string("] GROUP_WORLD_SIZE=2\n"), std::string("] TORCHELASTIC_RESTART_COUNT=1\n"),
          std::string("] attempt 1: sum of ranks 1")}) {
      EXPECT_TRUE(contains(r->output, line)) << line << " missing in\n" << r->output;
    }
  }
  EXPECT_TRUE(contains(new_host.output, "; this node hosts it now at 127.0.0.1:"))
      << new_host.output;
  EXPECT_TRUE(contains(new_host.output, "[0] GROUP_RANK=0")) << new_host.output;
  EXPECT_TRUE(contains(other.output, "; node 1's standby at 127.0.0.1:")) << other.output;
  EXPECT_TRUE(contains(other.output, "[1] GROUP_RANK=1")) << other.output;
}

// Note [A new host]: the host and node 1 lost at once, of a job of four.
// Nodes 2 and 3 give node 1's standby its takeover_timeout, then meet at
// node 2's; two of four are not a majority, so they refuse to re-form.
TEST(LauncherSuccession, WithoutAMajorityTheSurvivorsRefuseToReform) {
  const PortReservation reserved;
  const int port = reserved.port();
  const ChildSpec node =
      ddprun({"--nnodes", "2:4", "--rdzv-backend", "c10d", "--rdzv-endpoint",
              "127.0.0.1:" + std::to_string(port), "--rdzv-id", "minority", "--max-restarts", "1",
              "--monitor-interval", "0.1", "--rdzv-conf", "last_call_timeout=3,takeover_timeout=2",
              DDP_LAUNCH_WORKER, "shrink"});
  ChildProcess host(node, false);
  wait_for_host(port);
  std::vector<std::unique_ptr<ChildProcess>> others;
  std::vector<std::string> outputs(3);
  for (int i = 0; i < 3; ++i) others.push_back(std::make_unique<ChildProcess>(node, false));
  int node_1 = -1;
  for (int i = 0; i < 3; ++i) {
    outputs[i] = output_until(*others[i], "] round 0: all-reduced over 4");
    ASSERT_TRUE(contains(outputs[i], "] round 0: all-reduced over 4")) << outputs[i];
    if (contains(outputs[i], "[1] round 0")) node_1 = i;
  }
  ASSERT_GE(node_1, 0);
  host.signal_group(SIGKILL);
  others[node_1]->signal_group(SIGKILL);
  host.reap_blocking();
  others[node_1]->reap_blocking();
  const auto killed = std::chrono::steady_clock::now();
  for (int i = 0; i < 3; ++i) {
    if (i == node_1) continue;
    const ChildResult r = finish(*others[i], outputs[i]);
    EXPECT_EQ(r.exit_code, 4) << r.output;
    EXPECT_TRUE(contains(r.output, "node 1's standby at 127.0.0.1:")) << r.output;
    EXPECT_TRUE(contains(r.output, " did not take over within takeover_timeout 2 s (")) << r.output;
    const bool hosts = contains(r.output, "[2] round 0");
    EXPECT_TRUE(contains(r.output, hosts ? "; this node hosts it now at 127.0.0.1:"
                                         : "; node 2's standby at 127.0.0.1:"))
        << r.output;
    if (hosts) {
      EXPECT_TRUE(contains(r.output,
                           "after the host was lost, only 2 of the 4 node(s) of the last round "
                           "joined its successor at 127.0.0.1:"))
          << r.output;
    }
    EXPECT_FALSE(contains(r.output, "] DDP_RENDEZVOUS_ROUND=1")) << r.output;
  }
  // Two take-over timeouts and the last call at most, well inside the
  // join_timeout of 300 s that a hang would wait out.
  EXPECT_LT(std::chrono::steady_clock::now() - killed, 120s);
}

// Note [A new host]: a partition, played by SIGSTOP. Node 0 (the host, its
// agent and worker) goes silent without closing a connection. The other two
// notice it by the store's reply timeout, re-form around node 1's standby
// and finish. Node 0, continued once they are done, finds its peers gone;
// one node of three is not half of them, so it ends instead of running the
// job again alone, which --nnodes 1:3 would allow.
TEST(LauncherSuccession, AHostCutOffFromTheOthersDoesNotRunTheJobAgainAlone) {
  const PortReservation reserved;
  const int port = reserved.port();
  ThreeNodes nodes = three_shrinking_nodes("1:3", port, "partition", "3");
  ASSERT_TRUE(contains(nodes.host_output, "[0] round 0: all-reduced over 3")) << nodes.host_output;
  ChildProcess& host = *nodes.host;
  ChildProcess& first = *nodes.first;
  ChildProcess& second = *nodes.second;
  host.signal_group(SIGSTOP);
  const auto stopped = std::chrono::steady_clock::now();
  const ChildResult a = finish(first, "");
  const ChildResult b = finish(second, "");
  // node_timeout (5 s) and the store's grace (5 s), or the workers'
  // collective timeout (10 s), then the take-over: far below the
  // join_timeout of 300 s that a store call waited before.
  EXPECT_LT(std::chrono::steady_clock::now() - stopped, 60s);
  for (const ChildResult* r : {&a, &b}) {
    EXPECT_EQ(r->exit_code, 0) << r->output;
    EXPECT_TRUE(contains(r->output, "ddprun: lost the rendezvous store at 127.0.0.1:" +
                                        std::to_string(port) + " (node 0): "))
        << r->output;
    EXPECT_TRUE(contains(r->output, "] attempt 1: sum of ranks 1")) << r->output;  // 2 ranks
  }
  host.signal_group(SIGCONT);
  const ChildResult h = finish(host, nodes.host_output);
  EXPECT_EQ(h.exit_code, 4) << h.output;
  EXPECT_TRUE(contains(h.output,
                       "only 1 of the 3 node(s) of round 0 came back to the rendezvous "
                       "at 127.0.0.1:" +
                           std::to_string(port) +
                           " (this one included); the others may have re-formed the "
                           "job around a standby, so this node ends"))
      << h.output;
  EXPECT_FALSE(contains(h.output, "] DDP_RENDEZVOUS_ROUND=1")) << h.output;
}

// Note [Agent heartbeats] in src/launch/agent.hpp: a node whose
// launcher dies once its workers are done does not keep the host waiting
// out join_timeout (300 s) at the final exit.
TEST(LauncherHeartbeat, HostDoesNotWaitForANodeThatDiedAfterItsWorkers) {
  const PortReservation reserved;
  const int port = reserved.port();
  const ChildSpec node =
      ddprun({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
              "127.0.0.1:" + std::to_string(port), "--rdzv-id", "beat", "--monitor-interval", "0.1",
              "--rdzv-conf", "join_timeout=300", DDP_LAUNCH_WORKER, "linger", "8"});
  ChildProcess host(node, false);
  wait_for_host(port);
  ChildProcess lost(node, false);
  std::string lost_output = output_until(lost, "] attempt 0: sum of ranks 1");
  ASSERT_TRUE(contains(lost_output, "[1] attempt 0: sum of ranks 1")) << lost_output;
  // Its worker exits and its agent reports it done (k/done/1), while node
  // 0's worker lingers on.
  lost_output += output_until(lost, "ddprun: node 1: every worker succeeded");
  ASSERT_TRUE(contains(lost_output,
                       "ddprun: node 1: every worker succeeded; waiting for the other "
                       "nodes"))
      << lost_output;
  lost.signal_group(SIGKILL);
  lost.reap_blocking();
  const auto killed = std::chrono::steady_clock::now();
  const ChildResult result = finish(host, "", 120s);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_EQ(result.exit_code, 0) << result.output;
  // Linger (8 s) and node_timeout (5 s), far below join_timeout's 300 s, with
  // room for a loaded machine.
  EXPECT_LT(elapsed, 60.0) << result.output;
  EXPECT_TRUE(contains(result.output, "ddprun: node 1 stopped its heartbeat")) << result.output;
  EXPECT_TRUE(contains(result.output, "; not waiting for it")) << result.output;
  EXPECT_TRUE(contains(result.output, "[0] attempt 0: sum of ranks 1")) << result.output;
}

// A node whose launcher dies mid-run, its workers with it, while no
// collective would fail (the workers only sleep): node 0 notices the still
// heartbeat and fails the attempt instead of running on forever.
TEST(LauncherHeartbeat, NodeLostMidRunWithoutAFailedCollectiveFailsTheJob) {
  const PortReservation reserved;
  const int port = reserved.port();
  const ChildSpec node =
      ddprun({"--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
              "127.0.0.1:" + std::to_string(port), "--rdzv-id", "still", "--monitor-interval",
              "0.1", "--stop-grace", "1", DDP_LAUNCH_WORKER, "sleep"});
  ChildProcess host(node, false);
  wait_for_host(port);
  ChildProcess lost(node, false);
  std::string lost_output = output_until(lost, "] pid ");
  ASSERT_TRUE(contains(lost_output, "[1] pid ")) << lost_output;
  lost.signal_group(SIGKILL);
  lost.reap_blocking();
  const auto killed = std::chrono::steady_clock::now();
  const ChildResult result = finish(host, "", 60s);
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - killed).count();
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_LT(elapsed, 30.0) << result.output;
  EXPECT_TRUE(contains(result.output, "First failure: node 1 stopped its heartbeat "))
      << result.output;
}

}  // namespace
}  // namespace ddp::launch

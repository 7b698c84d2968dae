// ddprun "nodes" in network namespaces: two joined by a veth pair, whose job
// crosses a real (virtual) network link, not loopback; and three on a
// switch, whose host is cut off from the others by taking its link down
// while every process keeps running (a partition). Skipped, with the
// reason, where the machine does not allow creating namespaces.

#include <gtest/gtest.h>
#include <unistd.h>

#include <memory>
#include <regex>
#include <vector>

#include "ddp/launch/child_process.hpp"
#include "launch/launcher_runs.hpp"

namespace ddp::launch {
namespace {

using namespace std::chrono_literals;

ChildResult shell(const std::string& script) {
  return run_children({ChildSpec{{"/bin/sh", "-c", script}, {}, {}}}, 30s).at(0);
}

// Two namespaces A and B with addresses 10.250.N.1 and 10.250.N.2, removed
// again (with their veth pair) when the object goes away.
class NamespacePair {
 public:
  NamespacePair() {
    const std::string n = std::to_string(getpid() % 250);
    a_ = "ddpa" + n;
    b_ = "ddpb" + n;
    address_a_ = "10.250." + n + ".1";
    address_b_ = "10.250." + n + ".2";
    const std::string va = "dva" + n, vb = "dvb" + n;
    auto r =
        shell("set -e; ip netns add " + a_ + "; ip netns add " + b_ + "; ip link add " + va +
              " type veth peer name " + vb + "; ip link set " + va + " netns " + a_ +
              "; ip link set " + vb + " netns " + b_ + "; ip -n " + a_ + " addr add " + address_a_ +
              "/24 dev " + va + "; ip -n " + b_ + " addr add " + address_b_ + "/24 dev " + vb +
              "; for ns in " + a_ + " " + b_ + "; do ip -n $ns link set lo up; done; ip -n " + a_ +
              " link set " + va + " up; ip -n " + b_ + " link set " + vb + " up");
    ready_ = r.exit_code == 0;
    why_ = r.output;
  }
  ~NamespacePair() {
    shell("ip netns del " + a_ + " 2>/dev/null; ip netns del " + b_ + " 2>/dev/null");
  }

  bool ready() const { return ready_; }
  const std::string& why() const { return why_; }
  const std::string& a() const { return a_; }
  const std::string& b() const { return b_; }
  const std::string& address_a() const { return address_a_; }

 private:
  std::string a_, b_, address_a_, address_b_, why_;
  bool ready_ = false;
};

TEST(LauncherNetns, TwoNodesAcrossAVethPairSurviveAWorkerKill) {
  NamespacePair pair;
  if (!pair.ready()) GTEST_SKIP() << "cannot create network namespaces here: " << pair.why();
  auto node = [&](int rank, const std::string& ns) {
    return ChildSpec{{"/usr/sbin/ip",
                      "netns",
                      "exec",
                      ns,
                      DDP_DDPRUN,
                      "--nnodes",
                      "2",
                      "--node-rank",
                      std::to_string(rank),
                      "--master-addr",
                      pair.address_a(),
                      "--master-port",
                      "29500",
                      "--nproc-per-node",
                      "1",
                      "--run-id",
                      "netns",
                      "--max-restarts",
                      "1",
                      "--monitor-interval",
                      "0.1",
                      "--rendezvous-timeout",
                      "20",
                      DDP_LAUNCH_WORKER,
                      "kill-once",
                      "1"},
                     {},
                     {"RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT"}};
  };
  auto results = run_children({node(0, pair.a()), node(1, pair.b())}, 90s);
  for (int n : {0, 1}) {
    EXPECT_EQ(results[n].exit_code, 0) << results[0].output << results[1].output;
    EXPECT_NE(results[n].output.find("(restart 1 of 1)"), std::string::npos) << results[n].output;
    EXPECT_NE(results[n].output.find("attempt 1: sum of ranks 1"), std::string::npos)
        << results[n].output;
  }
  EXPECT_NE(results[1].output.find("[1] killing myself"), std::string::npos) << results[1].output;
  EXPECT_NE(results[1].output.find("ended with signal 9"), std::string::npos) << results[1].output;
}

// `nodes` namespaces, each linked by a veth pair to a bridge in a switch
// namespace of their own (10.251.N.1, .2, ...), removed again when the
// object goes away. cut(i) takes node i's link down at the switch: its
// packets are dropped, its connections stay open, its processes run on.
class SwitchedNamespaces {
 public:
  explicit SwitchedNamespaces(int nodes) {
    const std::string n = std::to_string(getpid() % 250);
    switch_ = "ddpsw" + n;
    std::string script = "set -e; ip netns add " + switch_ + "; ip -n " + switch_ +
                         " link add br0 type bridge; ip -n " + switch_ + " link set br0 up; ";
    for (int i = 0; i < nodes; ++i) {
      const std::string ns = "ddpn" + std::to_string(i) + "x" + n;
      const std::string port = "sw" + std::to_string(i);
      const std::string address = "10.251." + n + "." + std::to_string(i + 1);
      names_.push_back(ns);
      addresses_.push_back(address);
      script += "ip netns add " + ns + "; ip link add eth0 netns " + ns + " type veth peer name " +
                port + " netns " + switch_ + "; ip -n " + ns + " addr add " + address +
                "/24 dev eth0; ip -n " + ns + " link set lo up; ip -n " + ns +
                " link set eth0 up; ip -n " + switch_ + " link set " + port +
                " master br0; ip -n " + switch_ + " link set " + port + " up; ";
    }
    const auto r = shell(script);
    ready_ = r.exit_code == 0;
    why_ = r.output;
  }
  ~SwitchedNamespaces() {
    std::string script = "ip netns del " + switch_ + " 2>/dev/null; ";
    for (const auto& ns : names_) script += "ip netns del " + ns + " 2>/dev/null; ";
    shell(script);
  }

  bool ready() const { return ready_; }
  const std::string& why() const { return why_; }
  const std::string& name(int i) const { return names_.at(i); }
  const std::string& address(int i) const { return addresses_.at(i); }
  /// Waits (30 s at most) until something listens on `port` in node `i`.
  bool wait_listening(int i, int port) {
    const std::string probe = "for t in $(seq 250); do ip netns exec " + names_.at(i) +
                              " ss -Htln 'sport = :" + std::to_string(port) +
                              "' | grep -q . && exit 0; sleep 0.1; done; exit 1";
    return shell(probe).exit_code == 0;
  }
  /// Takes node `i`'s link down at the switch; true when it is.
  bool cut(int i) {
    return shell("ip -n " + switch_ + " link set sw" + std::to_string(i) + " down").exit_code == 0;
  }

 private:
  std::string switch_, why_;
  std::vector<std::string> names_, addresses_;
  bool ready_ = false;
};

// Note [A new host] in src/launch/node_rendezvous.hpp, under a real
// partition: three nodes of --nnodes 1:3 on a switch; once their job runs,
// the host's link is cut. Nothing is stopped or killed: the host's ddprun,
// its store and its worker go on, unable to reach anyone. The other two
// lose the store after node_timeout and its grace, re-form around node 1's
// standby and finish; the host, whose worker's collective times out,
// finds one node of the three back in its own store and ends with its
// named error (exit 4) instead of running the job a second time alone,
// which --nnodes 1:3 would allow.
TEST(LauncherNetns, APartitionedHostEndsAndTheJobRunsOnceOnTheOtherSide) {
  SwitchedNamespaces net(3);
  if (!net.ready()) GTEST_SKIP() << "cannot create network namespaces here: " << net.why();
  const int port = 29400;  // the namespaces are the test's own: nothing else listens there
  const std::string endpoint = net.address(0) + ":" + std::to_string(port);
  auto node = [&](int i) {
    std::vector<std::string> args = {"/usr/sbin/ip",
                                     "netns",
                                     "exec",
                                     net.name(i),
                                     DDP_DDPRUN,
                                     "--nnodes",
                                     "1:3",
                                     "--rdzv-backend",
                                     "c10d",
                                     "--rdzv-endpoint",
                                     endpoint,
                                     "--rdzv-id",
                                     "partition",
                                     "--max-restarts",
                                     "1",
                                     "--monitor-interval",
                                     "0.1",
                                     "--rdzv-conf",
                                     "last_call_timeout=3",
                                     DDP_LAUNCH_WORKER,
                                     "shrink"};
    return ChildSpec{args, {}, kUnset};
  };
  ChildProcess host(node(0), false);
  ASSERT_TRUE(net.wait_listening(0, port)) << "node 0 never hosted the rendezvous";
  std::string host_output;
  std::vector<std::unique_ptr<ChildProcess>> others;
  for (int i : {1, 2}) others.push_back(std::make_unique<ChildProcess>(node(i), false));
  host_output += output_until(host, "] round 0: all-reduced over 3");
  ASSERT_TRUE(contains(host_output, "[0] round 0: all-reduced over 3")) << host_output;

  ASSERT_TRUE(net.cut(0));
  const auto cut = std::chrono::steady_clock::now();
  const ChildResult a = finish(*others[0], "", 120s);
  const ChildResult b = finish(*others[1], "", 120s);
  // node_timeout (5 s) and the store's grace (5 s), or the workers'
  // collective timeout (10 s), then the take-over; room for a loaded machine.
  EXPECT_LT(std::chrono::steady_clock::now() - cut, 90s);
  for (const ChildResult* r : {&a, &b}) {
    EXPECT_EQ(r->exit_code, 0) << r->output;
    EXPECT_TRUE(
        contains(r->output, "ddprun: lost the rendezvous store at " + endpoint + " (node 0): "))
        << r->output;
    EXPECT_TRUE(contains(r->output, "(take-over 1, after round 0)")) << r->output;
    EXPECT_TRUE(contains(r->output, "] attempt 1: sum of ranks 1")) << r->output;  // 2 ranks
  }
  // Node rank 1 (whichever namespace arrived first after the host) hosts the
  // new store on its own address: "this node hosts it now at A:P" there,
  // "node 1's standby at A:P hosts it now" on the other.
  const std::regex new_store(R"((this node hosts it now at|node 1's standby at) (10\.[0-9.]+):)");
  std::smatch in_a, in_b;
  ASSERT_TRUE(std::regex_search(a.output, in_a, new_store)) << a.output;
  ASSERT_TRUE(std::regex_search(b.output, in_b, new_store)) << b.output;
  EXPECT_EQ(in_a[2].str(), in_b[2].str());
  EXPECT_TRUE(in_a[2].str() == net.address(1) || in_a[2].str() == net.address(2)) << in_a[2];
  EXPECT_NE(in_a[1].str(), in_b[1].str());  // one of them hosts it
  const ChildResult h = finish(host, host_output, 120s);
  EXPECT_EQ(h.exit_code, 4) << h.output;
  EXPECT_TRUE(contains(h.output,
                       "only 1 of the 3 node(s) of round 0 came back to the rendezvous "
                       "at " +
                           endpoint +
                           " (this one included); the others may have re-formed the "
                           "job around a standby, so this node ends"))
      << h.output;
  EXPECT_FALSE(contains(h.output, "] DDP_RENDEZVOUS_ROUND=1")) << h.output;
  EXPECT_FALSE(contains(h.output, "] attempt 1: sum of ranks")) << h.output;
}

}  // namespace
}  // namespace ddp::launch

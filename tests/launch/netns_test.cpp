// Two ddprun "nodes" in two network namespaces joined by a veth pair: the
// job crosses a real (virtual) network link, not loopback. Skipped, with the
// reason, where the machine does not allow creating namespaces.

#include <gtest/gtest.h>
#include <unistd.h>

#include "ddp/launch/child_process.hpp"

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

}  // namespace
}  // namespace ddp::launch

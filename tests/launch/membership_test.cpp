// Membership changes under ddprun's c10d rendezvous (Note [How nodes
// meet] in include/ddp/launch/node_rendezvous.hpp): a node that arrives at a
// running job re-forms it at the new size, and a node lost for good leaves
// the job running on the others while --nnodes MIN remain.

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <thread>

#include "ddp/launch/child_process.hpp"
#include "ddp/launch/port_reservation.hpp"
#include "launch/launcher_runs.hpp"

namespace ddp::launch {
namespace {

using namespace std::chrono_literals;

// Whether something accepts connections on 127.0.0.1:`port`.
bool host_listens(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  return ok;
}

// Reads `process`'s output until it contains `what` (or 60 s pass).
std::string output_until(ChildProcess& process, const std::string& what) {
  std::string output;
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  while (!contains(output, what) && std::chrono::steady_clock::now() < deadline) {
    wait_for_output({&process}, 100ms);
    process.pump([&](Stream, std::string_view chunk) { output.append(chunk); });
  }
  return output;
}

// The rest of `process`'s output, once it exited (or 90 s passed).
ChildResult finish(ChildProcess& process, std::string output) {
  const auto deadline = std::chrono::steady_clock::now() + 90s;
  while (!process.reap() && std::chrono::steady_clock::now() < deadline) {
    wait_for_output({&process}, 100ms);
    process.pump([&](Stream, std::string_view chunk) { output.append(chunk); });
  }
  if (!process.exited()) {
    process.signal_group(SIGKILL);
    process.reap_blocking();
  }
  process.pump([&](Stream, std::string_view chunk) { output.append(chunk); });
  ChildResult result;
  result.exit_code = process.exited() ? process.exit_code() : -1;
  result.output = output;
  return result;
}

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

}  // namespace
}  // namespace ddp::launch

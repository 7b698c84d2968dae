// Workers under torchrun 2.x's agent store (Note [Joining torchrun's store]
// in src/comm/init.cpp), with this process standing in for torchrun's agent: it
// hosts a c10d TCPStore and starts the workers with the variables torchrun
// gives them. InteropTorchrun runs the same under the real torchrun, where
// one is installed.

#include <gtest/gtest.h>

#include "base/compat/torch_compat.hpp"
#include "ddp/launch/child_process.hpp"
#include "launch/launcher_runs.hpp"

namespace ddp::launch {
namespace {

using namespace std::chrono_literals;

// The agent's store, on a port it picks itself (no race for a free port).
c10::intrusive_ptr<c10d::TCPStore> agent_store() {
  return base::compat::make_c10d_tcp_store("127.0.0.1", 0, /*is_server=*/true, 30s);
}

std::vector<ChildResult> run_attempt(c10d::TCPStore& agent, int restart_count) {
  auto worker = [&](int rank) {
    return ChildSpec{{DDP_LAUNCH_WORKER, "env"},
                     {{"RANK", std::to_string(rank)},
                      {"WORLD_SIZE", "2"},
                      {"LOCAL_RANK", std::to_string(rank)},
                      {"LOCAL_WORLD_SIZE", "2"},
                      {"MASTER_ADDR", "127.0.0.1"},
                      {"MASTER_PORT", std::to_string(agent.getPort())},
                      {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                      {"TORCHELASTIC_RESTART_COUNT", std::to_string(restart_count)}},
                     {"DDP_JOB_SECRET_FILE"}};
  };
  return run_children({worker(0), worker(1)}, 60s);
}

const std::string kWarning = "is torchrun's, which authenticates no one (PyTorch's SECURITY.md)";

TEST(LauncherAgentStore, WorkersJoinTheAgentsStoreAsClientsAndRankZeroWarnsOnce) {
  auto agent = agent_store();
  auto results = run_attempt(*agent, 0);
  for (int rank : {0, 1}) {
    EXPECT_EQ(results[rank].exit_code, 0) << results[rank].output;
    EXPECT_TRUE(contains(results[rank].output, "attempt 0: sum of ranks 1"))
        << results[rank].output;
    EXPECT_FALSE(contains(results[rank].output, "has no job secret")) << results[rank].output;
  }
  EXPECT_EQ(count(results[0].output, kWarning), 1) << results[0].output;
  EXPECT_TRUE(contains(results[0].output,
                       "listens on every interface, so any machine that reaches port " +
                           std::to_string(agent->getPort()) +
                           " of its host can read and change the job's keys. Run torchrun jobs "
                           "on a trusted network only, or start the job with ddprun"))
      << results[0].output;
  EXPECT_EQ(count(results[1].output, kWarning), 0) << results[1].output;
  // The ranks met in the agent's store, under torchrun's worker prefix.
  EXPECT_TRUE(agent->check({"/worker/attempt_0/ddp/joined/0", "/worker/attempt_0/ddp/joined/1"}));
}

// The agent's store outlives its workers: a restarted job must not meet the
// failed attempt's keys. Attempt 0 here left the keys of a 3-rank job.
TEST(LauncherAgentStore, ARestartedJobMeetsInItsOwnAttempt) {
  auto agent = agent_store();
  const std::string three = "3";
  for (const char* key : {"/worker/attempt_0/ddp/joined/0", "/worker/attempt_0/ddp/joined/1"}) {
    agent->set(key, std::vector<uint8_t>(three.begin(), three.end()));
  }
  auto results = run_attempt(*agent, 1);
  for (int rank : {0, 1}) {
    EXPECT_EQ(results[rank].exit_code, 0) << results[rank].output;
    EXPECT_TRUE(contains(results[rank].output, "attempt 1: sum of ranks 1"))
        << results[rank].output;
  }
  EXPECT_TRUE(agent->check({"/worker/attempt_1/ddp/joined/0", "/worker/attempt_1/ddp/joined/1"}));
}

}  // namespace
}  // namespace ddp::launch

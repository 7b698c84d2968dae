// resolve_topology(): every launcher's variables, precedence, overrides, and
// the message of each kind of bad value.

#include <gtest/gtest.h>

#include "common/error_capture.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/environment.hpp"
#include "ddp/comm/init.hpp"

namespace ddp {
namespace {

/// The ConfigError message of resolving `env` with `overrides`; as
/// error_of(), the test fails at the caller's line when there is none.
std::string config_error_of(const EnvironmentMap& env, const TopologyOverrides& overrides = {},
                            const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return ddp::testing::error_of<ConfigError>([&] { resolve_topology(env, overrides); }, file, line);
}

TEST(CoreEnvironment, NoVariablesMeansOneProcess) {
  Topology t = resolve_topology({});
  EXPECT_EQ(t.rank, 0);
  EXPECT_EQ(t.world_size, 1);
  EXPECT_EQ(t.local_rank, 0);
  EXPECT_EQ(t.local_world_size, 1);
  EXPECT_EQ(t.source, LaunchSource::kNone);
}

TEST(CoreEnvironment, Torchrun) {
  Topology t = resolve_topology({{"RANK", "5"},
                                 {"WORLD_SIZE", "8"},
                                 {"LOCAL_RANK", "1"},
                                 {"LOCAL_WORLD_SIZE", "4"},
                                 {"GROUP_RANK", "1"},
                                 {"MASTER_ADDR", "node0"},
                                 {"MASTER_PORT", "1234"}});
  EXPECT_EQ(t.rank, 5);
  EXPECT_EQ(t.world_size, 8);
  EXPECT_EQ(t.local_rank, 1);
  EXPECT_EQ(t.local_world_size, 4);
  EXPECT_EQ(t.group_rank, 1);
  EXPECT_EQ(t.master_addr, "node0");
  EXPECT_EQ(t.master_port, 1234);
  EXPECT_EQ(t.source, LaunchSource::kTorchrun);
}

TEST(CoreEnvironment, TorchrunWithoutLocalVariablesAssumesOneNode) {
  Topology t = resolve_topology({{"RANK", "2"}, {"WORLD_SIZE", "3"}, {"MASTER_ADDR", "h"}});
  EXPECT_EQ(t.local_rank, 2);
  EXPECT_EQ(t.local_world_size, 3);
  EXPECT_EQ(t.group_rank, 0);
  EXPECT_EQ(t.master_port, kDefaultMasterPort);
}

TEST(CoreEnvironment, OpenMpi) {
  Topology t = resolve_topology({{"OMPI_COMM_WORLD_RANK", "3"},
                                 {"OMPI_COMM_WORLD_SIZE", "4"},
                                 {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                                 {"OMPI_COMM_WORLD_LOCAL_SIZE", "2"},
                                 {"MASTER_ADDR", "10.0.0.1"},
                                 {"MASTER_PORT", "4000"}});
  EXPECT_EQ(t.rank, 3);
  EXPECT_EQ(t.world_size, 4);
  EXPECT_EQ(t.local_rank, 1);
  EXPECT_EQ(t.local_world_size, 2);
  EXPECT_EQ(t.group_rank, 1);
  EXPECT_EQ(t.source, LaunchSource::kOpenMpi);
}

TEST(CoreEnvironment, SlurmDerivesMasterFromNodeList) {
  Topology t = resolve_topology({{"SLURM_PROCID", "6"},
                                 {"SLURM_NTASKS", "7"},
                                 {"SLURM_LOCALID", "0"},
                                 {"SLURM_NODEID", "3"},
                                 {"SLURM_TASKS_PER_NODE", "2(x3),1"},
                                 {"SLURM_JOB_NODELIST", "gpu[007-010,012],cpu1"}});
  EXPECT_EQ(t.rank, 6);
  EXPECT_EQ(t.world_size, 7);
  EXPECT_EQ(t.local_world_size, 1);  // The fourth node holds one task.
  EXPECT_EQ(t.group_rank, 3);
  EXPECT_EQ(t.master_addr, "gpu007");
  EXPECT_EQ(t.source, LaunchSource::kSlurm);
}

TEST(CoreEnvironment, SlurmNtasksPerNodeWins) {
  Topology t = resolve_topology({{"SLURM_PROCID", "1"},
                                 {"SLURM_NTASKS", "4"},
                                 {"SLURM_LOCALID", "1"},
                                 {"SLURM_NTASKS_PER_NODE", "2"},
                                 {"SLURM_TASKS_PER_NODE", "4"},
                                 {"MASTER_ADDR", "n1"}});
  EXPECT_EQ(t.local_world_size, 2);
  EXPECT_EQ(t.master_addr, "n1");
}

TEST(CoreEnvironment, TorchrunTakesPrecedenceOverSlurm) {
  // torchrun started inside an salloc shell: Slurm's variables describe the
  // allocation, torchrun's the worker.
  Topology t = resolve_topology({{"RANK", "1"},
                                 {"WORLD_SIZE", "2"},
                                 {"MASTER_ADDR", "a"},
                                 {"SLURM_PROCID", "0"},
                                 {"SLURM_NTASKS", "1"}});
  EXPECT_EQ(t.source, LaunchSource::kTorchrun);
  EXPECT_EQ(t.rank, 1);
}

TEST(CoreEnvironment, OverridesWin) {
  TopologyOverrides o;
  o.rank = 0;
  o.world_size = 2;
  o.master_port = 5555;
  Topology t = resolve_topology({{"RANK", "1"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "x"}}, o);
  EXPECT_EQ(t.rank, 0);
  EXPECT_EQ(t.world_size, 2);
  EXPECT_EQ(t.master_port, 5555);
  EXPECT_EQ(t.master_addr, "x");
  EXPECT_EQ(t.source, LaunchSource::kExplicit);
}

// torchrun 2.x's workers: its agent hosts the store (Note [Joining
// torchrun's store] in src/comm/init.cpp).
TEST(CoreEnvironment, TorchrunAgentStoreAndRestartCount) {
  const EnvironmentMap agent = {{"RANK", "1"},
                                {"WORLD_SIZE", "2"},
                                {"MASTER_ADDR", "node0"},
                                {"MASTER_PORT", "29400"},
                                {"TORCHELASTIC_USE_AGENT_STORE", "True"},
                                {"TORCHELASTIC_RESTART_COUNT", "3"}};
  Topology t = resolve_topology(agent);
  EXPECT_TRUE(t.agent_store);
  EXPECT_EQ(t.restart_count, 3);
  EXPECT_EQ(t.master_addr, "node0");
  EXPECT_EQ(t.master_port, 29400);

  // ddprun's workers, and torchrun 1.x's with its c10d rendezvous.
  EnvironmentMap own = agent;
  own["TORCHELASTIC_USE_AGENT_STORE"] = "False";
  EXPECT_FALSE(resolve_topology(own).agent_store);
  own.erase("TORCHELASTIC_USE_AGENT_STORE");
  own.erase("TORCHELASTIC_RESTART_COUNT");
  t = resolve_topology(own);
  EXPECT_FALSE(t.agent_store);
  EXPECT_EQ(t.restart_count, 0);

  // An override that moves the store elsewhere means a store ddp hosts; one
  // that names the launcher's own address keeps the agent's.
  TopologyOverrides elsewhere;
  elsewhere.master_port = 29500;
  EXPECT_FALSE(resolve_topology(agent, elsewhere).agent_store);
  elsewhere = {};
  elsewhere.master_addr = "node7";
  EXPECT_FALSE(resolve_topology(agent, elsewhere).agent_store);
  TopologyOverrides same;
  same.master_addr = "node0";
  same.master_port = 29400;
  EXPECT_TRUE(resolve_topology(agent, same).agent_store);

  // Other launchers' variables never mean torchrun's store.
  EXPECT_FALSE(resolve_topology({{"OMPI_COMM_WORLD_RANK", "0"},
                                 {"OMPI_COMM_WORLD_SIZE", "2"},
                                 {"MASTER_ADDR", "h"},
                                 {"TORCHELASTIC_USE_AGENT_STORE", "True"}})
                   .agent_store);

  EnvironmentMap bad = agent;
  bad["TORCHELASTIC_USE_AGENT_STORE"] = "1";
  EXPECT_EQ(config_error_of(bad),
            "TORCHELASTIC_USE_AGENT_STORE (torchrun) is '1'; torchrun sets it to True (its agent "
            "hosts the rendezvous store) or False. Unset it, or leave it to the launcher.");
  bad = agent;
  bad["TORCHELASTIC_RESTART_COUNT"] = "-1";
  EXPECT_NE(config_error_of(bad).find("TORCHELASTIC_RESTART_COUNT (torchrun) is -1"),
            std::string::npos);
}

TEST(CoreEnvironment, BadValuesNameVariableValueAndFix) {
  EXPECT_EQ(config_error_of({{"RANK", "4"}, {"WORLD_SIZE", "4"}, {"MASTER_ADDR", "h"}}),
            "RANK (torchrun) is 4, but ranks run from 0 to 3 (WORLD_SIZE (torchrun) is 4). Each "
            "process needs a distinct rank below the world size: check the launcher command or "
            "the values you exported.");
  EXPECT_EQ(config_error_of({{"RANK", "0"}, {"WORLD_SIZE", "4x"}}),
            "WORLD_SIZE (torchrun) is '4x', which is not a whole number. It must be an integer "
            "such as 0 or 4: check the launcher command or script that set it.");
  EXPECT_NE(config_error_of({{"WORLD_SIZE", "2"}}).find("WORLD_SIZE is set but RANK is missing"),
            std::string::npos);
  EXPECT_NE(
      config_error_of({{"RANK", "0"}, {"WORLD_SIZE", "0"}}).find("WORLD_SIZE (torchrun) is 0"),
      std::string::npos);
  EXPECT_NE(config_error_of(
                {{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", "h"}, {"MASTER_PORT", "0"}})
                .find("MASTER_PORT (torchrun) is 0, but a TCP port must be between 1 and 65535"),
            std::string::npos);
  EXPECT_NE(config_error_of({{"RANK", "0"}, {"WORLD_SIZE", "2"}, {"MASTER_ADDR", ""}})
                .find("MASTER_ADDR is empty"),
            std::string::npos);
  EXPECT_NE(config_error_of({{"RANK", "0"},
                             {"WORLD_SIZE", "2"},
                             {"LOCAL_RANK", "3"},
                             {"LOCAL_WORLD_SIZE", "2"},
                             {"MASTER_ADDR", "h"}})
                .find("LOCAL_RANK (torchrun) is 3, but local ranks run from 0 to 1"),
            std::string::npos);
  TopologyOverrides only_rank;
  only_rank.rank = 1;
  EXPECT_NE(config_error_of({}, only_rank).find("explicit rank was given without world_size"),
            std::string::npos);
}

TEST(CoreEnvironment, CaptureSeesTheProcessEnvironment) {
  setenv("DDP_TEST_CAPTURE", "42", 1);
  EXPECT_EQ(capture_environment().at("DDP_TEST_CAPTURE"), "42");
  unsetenv("DDP_TEST_CAPTURE");
}

// A hot spare of ddprun --spares has no rank until it takes one inside
// elastic::run (Note [A spare waits for a seat]): init() refuses it, so it
// cannot train alone as a job of one process.
TEST(CoreEnvironment, InitRefusesAHotSpare) {
  const std::string message = ddp::testing::error_of<ConfigError>([] {
    init(InitOptions().backend("gloo"), {{kSpareVariable, "3f9a0c1d"}});
  });
  EXPECT_EQ(message,
            "this process is a hot spare of ddprun --spares (DDP_SPARE=3f9a0c1d) and called "
            "ddp::init(): a spare has no rank until it takes a lost worker's, inside "
            "ddp::elastic::run. Train inside elastic::run, or drop --spares.");
}

}  // namespace
}  // namespace ddp

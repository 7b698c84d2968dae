#include "multiprocess/harness.hpp"

namespace ddp::testing {
namespace {

// Launcher variables the test runner itself might have (a CI job under
// Slurm, say): a worker must see only what its test gives it.
const std::vector<std::string> kLauncherVariables = {"RANK",
                                                     "WORLD_SIZE",
                                                     "LOCAL_RANK",
                                                     "LOCAL_WORLD_SIZE",
                                                     "GROUP_RANK",
                                                     "MASTER_ADDR",
                                                     "MASTER_PORT",
                                                     "OMPI_COMM_WORLD_RANK",
                                                     "OMPI_COMM_WORLD_SIZE",
                                                     "OMPI_COMM_WORLD_LOCAL_RANK",
                                                     "OMPI_COMM_WORLD_LOCAL_SIZE",
                                                     "SLURM_PROCID",
                                                     "SLURM_NTASKS",
                                                     "SLURM_LOCALID",
                                                     "SLURM_NODEID",
                                                     "SLURM_NTASKS_PER_NODE",
                                                     "SLURM_TASKS_PER_NODE",
                                                     "SLURM_JOB_NODELIST",
                                                     "SLURM_STEP_NODELIST",
                                                     "GLOO_SOCKET_IFNAME"};

}  // namespace

Environment torchrunEnvironment(int rank, int world, int port) {
  return {{"RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_RANK", std::to_string(rank)},
          {"LOCAL_WORLD_SIZE", std::to_string(world)},
          {"GROUP_RANK", "0"},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)},
          {"OMP_NUM_THREADS", "1"}};
}

EnvironmentFor onNodes(int nodes) {
  return [nodes](int rank, int world, int port) {
    auto env = torchrunEnvironment(rank, world, port);
    const int per_node = world / nodes;
    env["LOCAL_RANK"] = std::to_string(rank % per_node);
    env["LOCAL_WORLD_SIZE"] = std::to_string(per_node);
    env["GROUP_RANK"] = std::to_string(rank / per_node);
    return env;
  };
}

std::vector<launch::ChildResult> runRanks(int world, const std::vector<std::string>& args,
                                          const EnvironmentFor& environment_for,
                                          std::chrono::milliseconds deadline) {
  const int port = launch::findFreePort();
  std::vector<launch::ChildSpec> specs;
  for (int rank = 0; rank < world; ++rank) {
    launch::ChildSpec spec;
    spec.argv.push_back(DDP_TEST_WORKER);
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    spec.unset_env = kLauncherVariables;
    spec.env = environment_for(rank, world, port);
    specs.push_back(std::move(spec));
  }
  return launch::runChildren(specs, deadline);
}

long failedAfterMs(const launch::ChildResult& result) {
  const std::string marker = "all_reduce failed after ";
  const auto at = result.output.find(marker);
  return at == std::string::npos ? -1 : std::stol(result.output.substr(at + marker.size()));
}

std::string describe(const std::vector<launch::ChildResult>& results) {
  std::string text;
  for (size_t rank = 0; rank < results.size(); ++rank) {
    text += "--- rank " + std::to_string(rank) + " (pid " + std::to_string(results[rank].pid) +
            "): " + results[rank].status() + "\n" + results[rank].output + "\n";
  }
  return text;
}

}  // namespace ddp::testing

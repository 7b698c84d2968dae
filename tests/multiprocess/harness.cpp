#include "multiprocess/harness.hpp"

#include "common/launcher_variables.hpp"
#include "ddp/launch/port_reservation.hpp"

namespace ddp::testing {
Environment torchrun_environment(int rank, int world, int port) {
  return {{"RANK", std::to_string(rank)},
          {"WORLD_SIZE", std::to_string(world)},
          {"LOCAL_RANK", std::to_string(rank)},
          {"LOCAL_WORLD_SIZE", std::to_string(world)},
          {"GROUP_RANK", "0"},
          {"MASTER_ADDR", "127.0.0.1"},
          {"MASTER_PORT", std::to_string(port)},
          {"OMP_NUM_THREADS", "1"}};
}

EnvironmentFor on_nodes(int nodes) {
  return [nodes](int rank, int world, int port) {
    auto env = torchrun_environment(rank, world, port);
    const int per_node = world / nodes;
    env["LOCAL_RANK"] = std::to_string(rank % per_node);
    env["LOCAL_WORLD_SIZE"] = std::to_string(per_node);
    env["GROUP_RANK"] = std::to_string(rank / per_node);
    return env;
  };
}

EnvironmentFor on_uneven_nodes() {
  return [](int rank, int world, int port) {
    auto env = torchrun_environment(rank, world, port);
    env["GROUP_RANK"] = rank < 2 ? "0" : "1";
    env["LOCAL_RANK"] = std::to_string(rank < 2 ? rank : 0);
    env["LOCAL_WORLD_SIZE"] = rank < 2 ? "2" : "1";
    return env;
  };
}

std::vector<launch::ChildResult> run_ranks(int world, const std::vector<std::string>& args,
                                           const EnvironmentFor& environment_for,
                                           std::chrono::milliseconds deadline) {
  const launch::PortReservation reserved;  // Note [A port held from choice to use]
  const int port = reserved.port();
  std::vector<launch::ChildSpec> specs;
  for (int rank = 0; rank < world; ++rank) {
    launch::ChildSpec spec;
    spec.argv.push_back(DDP_TEST_WORKER);
    spec.argv.insert(spec.argv.end(), args.begin(), args.end());
    spec.unset_env = kLauncherVariables;
    spec.env = environment_for(rank, world, port);
    specs.push_back(std::move(spec));
  }
  return launch::run_children(specs, deadline);
}

long failed_after_ms(const launch::ChildResult& result) {
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

#include "launch/worker_environment.hpp"

#include <algorithm>
#include <thread>

#include "comm/store/job_secret.hpp"
#include "comm/store/worker_protocol.hpp"
#include "ddp/comm/environment.hpp"
#include "ddp/comm/flight_recorder.hpp"

namespace ddp::launch {

std::map<std::string, std::string> worker_environment(const LaunchPlan& plan,
                                                      const WorkerPlacement& p) {
  const auto& o = plan.options;
  std::map<std::string, std::string> env = {
      {"RANK", std::to_string(p.rank)},
      {"LOCAL_RANK", std::to_string(p.local_rank)},
      {"GROUP_RANK", std::to_string(p.node_rank)},
      {"ROLE_RANK", std::to_string(p.rank)},
      {"ROLE_NAME", "default"},
      {"LOCAL_WORLD_SIZE", std::to_string(plan.nproc)},
      {"WORLD_SIZE", std::to_string(p.world_size)},
      {"ROLE_WORLD_SIZE", std::to_string(p.world_size)},
      {"GROUP_WORLD_SIZE", std::to_string(p.nnodes)},
      {"MASTER_ADDR", p.master_addr},
      {"MASTER_PORT", std::to_string(p.master_port)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(p.restart_count)},
      {comm::store::kRendezvousRoundVariable, std::to_string(p.round)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(o.max_restarts)},
      {"TORCHELASTIC_RUN_ID", o.run_id},
      {"TORCHELASTIC_USE_AGENT_STORE", "False"},
      {"TORCHELASTIC_ERROR_FILE", p.error_file},
      {flight_recorder::kFileVariable, p.flight_recorder_file},
  };
  if (!plan.secret_file.empty()) env[store::kJobSecretFileVariable] = plan.secret_file;
  if (!p.recovery_store.empty()) {
    env[kRecoveryStoreVariable] = p.recovery_store;
    env[kRecoveryGenerationVariable] = std::to_string(p.generation);
    if (!p.recovery_store_file.empty()) env[kRecoveryStoreFileVariable] = p.recovery_store_file;
  }
  // Note [Intra-op threads per worker]
  // Each worker gets cores / workers-on-the-node intra-op threads unless the
  // user chose (OMP_NUM_THREADS), where torchrun gives every worker one
  // thread: the node's cores are used whatever the number of workers.
  // OpenBLAS built with pthreads ignores OpenMP's count and starts a thread
  // per core in every worker, which busy-wait beside each other's, so
  // OPENBLAS_NUM_THREADS, unless the user chose, gets the same count
  // (Debian's OpenMP OpenBLAS, which ddp installs, follows LibTorch's
  // threads whatever it says). Measured in docs/guide/performance.md.
  const EnvironmentMap inherited = capture_environment();
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (!inherited.count("OMP_NUM_THREADS"))
    env["OMP_NUM_THREADS"] = std::to_string(std::max(1, cores / plan.nproc));
  if (!inherited.count("OPENBLAS_NUM_THREADS")) {
    const auto omp = inherited.find("OMP_NUM_THREADS");
    env["OPENBLAS_NUM_THREADS"] = omp != inherited.end() ? omp->second : env["OMP_NUM_THREADS"];
  }
  if (!plan.allocator.preload.empty()) {  // Note [The host allocator] in ddp/base/allocator.hpp
    const auto preload = inherited.find("LD_PRELOAD");
    env["LD_PRELOAD"] =
        worker_preload(plan.allocator, preload != inherited.end() ? preload->second : "");
  }
  return env;
}

const std::vector<std::string>& placing_variables() {
  static const std::vector<std::string> names = {
      "RANK",       "LOCAL_RANK",      "GROUP_RANK",      "ROLE_RANK",
      "WORLD_SIZE", "ROLE_WORLD_SIZE", "LOCAL_WORLD_SIZE"};
  return names;
}

std::map<std::string, std::string> spare_environment(const LaunchPlan& plan,
                                                     const WorkerPlacement& placement,
                                                     const std::string& id) {
  std::map<std::string, std::string> env = worker_environment(plan, placement);
  for (const std::string& name : placing_variables()) env.erase(name);
  env[kSpareVariable] = id;
  return env;
}

}  // namespace ddp::launch

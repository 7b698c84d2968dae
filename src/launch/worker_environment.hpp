#pragma once

// Internal: the environment ddprun gives a worker, as torchrun gives it
// (RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR, TORCHELASTIC_*, and ddp's
// own DDP_* variables).

#include <map>
#include <string>
#include <vector>

#include "launch/launch_options.hpp"

namespace ddp::launch {

/// The environment of local worker `local_rank`, as torchrun gives it.
struct WorkerPlacement {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int node_rank = 0;    ///< GROUP_RANK
  int nnodes = 1;       ///< GROUP_WORLD_SIZE
  int rank_offset = 0;  ///< global rank of this node's local rank 0
  std::string master_addr;
  int master_port = 0;
  int restart_count = 0;
  int round = 0;  ///< the rendezvous round (DDP_RENDEZVOUS_ROUND)
  std::string error_file;
  std::string flight_recorder_file;  ///< DDP_FLIGHT_RECORDER_FILE
  std::string recovery_store;        ///< DDP_RECOVERY_STORE (--recovery memory)
  std::string recovery_store_file;   ///< DDP_RECOVERY_STORE_FILE, beside it
  int generation = 0;                ///< DDP_RECOVERY_GENERATION
};
std::map<std::string, std::string> worker_environment(const LaunchPlan& plan,
                                                      const WorkerPlacement& placement);

/// A hot spare's environment (Note [A spare waits for a seat] in
/// ddp/elastic/run.hpp): a worker's from `placement`, without the
/// variables that place it in the job (placing_variables()), with
/// DDP_SPARE=`id`.
std::map<std::string, std::string> spare_environment(const LaunchPlan& plan,
                                                     const WorkerPlacement& placement,
                                                     const std::string& id);

/// RANK, LOCAL_RANK, WORLD_SIZE and the others a spare starts without.
const std::vector<std::string>& placing_variables();

}  // namespace ddp::launch

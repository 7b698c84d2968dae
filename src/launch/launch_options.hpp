#pragma once

// Internal: what ddprun was asked to do, validated and resolved.

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace ddp::launch {

/// ddprun's options, torchrun's names.
struct LaunchOptions {
  std::string nproc_per_node = "1";  ///< a number, or "auto"
  int nnodes = 1;
  int node_rank = 0;
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool standalone = false;
  int max_restarts = 0;
  double monitor_interval_s = 0.5;
  std::string run_id = "none";
  std::string log_dir;
  bool tee = false;
  /// Seconds between SIGTERM and SIGKILL when stopping workers.
  double stop_grace_s = 5;
  /// How long nodes wait for each other at each (re)start.
  double rendezvous_timeout_s = 300;
  /// The job's secret, the same file on every node (ddp's own option; one
  /// node generates its own when none is given).
  std::string secret_file;
  /// The program and its arguments.
  std::vector<std::string> command;
};

/// LaunchOptions after validation: numbers resolved, program located.
struct LaunchPlan {
  LaunchOptions options;
  int nproc = 1;             ///< workers on this node
  std::string program_path;  ///< command[0] resolved through PATH
  std::chrono::milliseconds monitor_interval{500};
  std::chrono::milliseconds stop_grace{5000};
  std::chrono::milliseconds rendezvous_timeout{300000};
  /// Absolute path of the job's secret file, handed to the workers; empty
  /// for several nodes without --secret-file (no authentication).
  std::string secret_file;
};

/// Validates `options` (nproc at least 1, ports in range, node rank below
/// nnodes, the program exists and is executable, the master port free on
/// node 0) and resolves them. Throws ddp::ConfigError (bad values) or
/// ddp::RendezvousError (port in use) with a message saying what to do.
LaunchPlan resolveLaunch(const LaunchOptions& options);

/// The environment of local worker `local_rank`, as torchrun gives it.
struct WorkerPlacement {
  int rank = 0;
  int local_rank = 0;
  int world_size = 1;
  int rank_offset = 0;  ///< global rank of this node's local rank 0
  std::string master_addr;
  int master_port = 0;
  int restart_count = 0;
  std::string error_file;
};
std::map<std::string, std::string> workerEnvironment(const LaunchPlan& plan,
                                                     const WorkerPlacement& placement);

}  // namespace ddp::launch

#pragma once

// Internal: what ddprun was asked to do, validated and resolved.

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "launch/allocator_choice.hpp"
#include "launch/stream_choice.hpp"

namespace ddp::launch {

/// ddprun's options, torchrun's names and meanings (docs/guide/ddprun.md).
struct LaunchOptions {
  std::string nproc_per_node = "1";  ///< a number, "gpu", "cpu" or "auto"
  std::string nnodes = "1";          ///< a number of nodes, or MIN:MAX
  int node_rank = 0;                 ///< the static backend's node index
  std::string master_addr = "127.0.0.1";
  int master_port = 29500;
  bool standalone = false;
  /// "static" (node ranks given, node 0 hosts at --master-addr) or "c10d"
  /// (nodes meet at --rdzv-endpoint and are ranked as they join).
  std::string rdzv_backend = "static";
  std::string rdzv_endpoint;  ///< HOST[:PORT] of the c10d rendezvous
  std::string rdzv_conf;      ///< KEY=VALUE,...: join_timeout, last_call_timeout, node_timeout,
                              ///< takeover_timeout, is_host
  std::string local_addr;     ///< this node's address for the others
  int max_restarts = 0;
  /// After a worker fails: "disk" stops every worker and starts them all
  /// again (torchrun's way; the program resumes from its snapshot),
  /// "memory" starts the failed one again alone and the others keep their
  /// state (Note [Recovery in memory] in ddp/elastic/run.hpp).
  std::string recovery = "disk";
  /// With --recovery memory: hot spares per node, started ahead of need and
  /// waiting inside ddp::elastic::run to take a lost worker's rank (Note [A
  /// spare waits for a seat] in ddp/elastic/run.hpp).
  int spares = 0;
  double monitor_interval_s = 0.5;
  std::string run_id = "none";
  std::string log_dir;
  std::string redirects = "0";  ///< torchrun's 0-3, or LOCAL_RANK:VALUE,...
  std::string tee = "0";        ///< as redirects, and shown on the console too
  /// Seconds between SIGTERM and SIGKILL when stopping workers.
  double stop_grace_s = 5;
  /// How long nodes wait for each other at each (re)start; --rdzv-conf's
  /// join_timeout overrides it.
  double rendezvous_timeout_s = 300;
  /// The job's secret, the same file on every node (ddp's own option; one
  /// node generates its own when none is given).
  std::string secret_file;
  /// torchrun's --no-python: run the program itself even where it looks
  /// like a Python script (Note [Python scripts]).
  bool no_python = false;
  /// The host allocator preloaded into the workers: "auto", "tcmalloc",
  /// "glibc" or a library's path (resolve_allocator(); Note [The host
  /// allocator] in ddp/base/allocator.hpp).
  std::string allocator = "auto";
  /// The program and its arguments.
  std::vector<std::string> command;
};

/// LaunchOptions after validation: numbers resolved, program located.
struct LaunchPlan {
  LaunchOptions options;
  int nproc = 1;           ///< workers on this node
  int min_nodes = 1;       ///< --nnodes MIN (or N)
  int max_nodes = 1;       ///< --nnodes MAX (or N)
  bool c10d = false;       ///< --rdzv-backend c10d: ranks by joining order
  std::string store_host;  ///< where the agents' store is: the endpoint, or
  int store_port = 0;      ///<   --master-addr:--master-port for static
  /// --rdzv-conf is_host: unset, the node whose bind of the endpoint
  /// succeeds hosts (torchrun's fallback to client on an address in use).
  std::optional<bool> is_host;
  StreamChoice redirects;
  StreamChoice tee;
  bool memory_recovery = false;  ///< --recovery memory
  int spares = 0;                ///< --spares: hot spares per node
  AllocatorChoice allocator;     ///< --allocator, resolved on this node
  /// What each worker runs: the command with its program resolved through
  /// PATH, or `python3 -u SCRIPT ARGS...` (Note [Python scripts]).
  std::vector<std::string> argv;
  std::chrono::milliseconds monitor_interval{500};
  std::chrono::milliseconds stop_grace{5000};
  std::chrono::milliseconds rendezvous_timeout{300000};  ///< join_timeout
  std::chrono::milliseconds last_call_timeout{30000};
  /// --rdzv-conf node_timeout: how long an agent's heartbeat may stand still
  /// before the host counts its node as gone (Note [Agent heartbeats] in
  /// launch/agent.hpp); unset, max(5 s, 10 monitor intervals).
  std::chrono::milliseconds node_timeout{0};
  /// --rdzv-conf takeover_timeout: how long a node that lost the host waits
  /// for each standby in turn to host the store (Note [A new host] in
  /// launch/node_rendezvous.hpp); unset, max(2 s, 20 monitor intervals).
  std::chrono::milliseconds takeover_timeout{0};
  /// Absolute path of the job's secret file, handed to the workers; empty
  /// for several nodes without --secret-file (no authentication).
  std::string secret_file;
};

/// Validates `options` (nproc at least 1, --nnodes N or MIN:MAX with the
/// static backend's MIN equal to MAX, ports in range, node rank below
/// nnodes, known --rdzv-conf keys, the program exists and is executable
/// or is a script that python3 from PATH runs (Note [Python scripts]),
/// the master port free on the static backend's node 0, --allocator) and
/// resolves them.
/// Throws ddp::ConfigError (bad values) or ddp::RendezvousError (port in
/// use) with a message saying what to do.
LaunchPlan resolve_launch(const LaunchOptions& options);

}  // namespace ddp::launch

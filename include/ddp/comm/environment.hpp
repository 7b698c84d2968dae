#pragma once

/// \file environment.hpp
/// Where this process sits in a job: rank, world size, local rank, node and
/// the rendezvous address, as given by torchrun (or ddprun), Open MPI or
/// Slurm, optionally overridden by explicit values.
///
/// Note [Environment variables are read in one place]
/// capture_environment() is the only function in ddp that reads the process
/// environment. Everything else works on the EnvironmentMap it returns, so
/// resolution is a pure function that tests can call with any variables.

#include <map>
#include <optional>
#include <string>

namespace ddp::comm {

/// The launcher whose variables described this process.
enum class LaunchSource {
  kNone,      ///< No launcher variables: a single process.
  kTorchrun,  ///< RANK / WORLD_SIZE / LOCAL_RANK ... (torchrun, ddprun).
  kOpenMpi,   ///< OMPI_COMM_WORLD_RANK / _SIZE / _LOCAL_RANK / _LOCAL_SIZE.
  kSlurm,     ///< SLURM_PROCID / SLURM_NTASKS / SLURM_LOCALID ...
  kExplicit,  ///< Rank and world size given by the program itself.
};

/// A human-readable name of a launch source ("torchrun", "Open MPI", ...).
const char* to_string(LaunchSource source) noexcept;

/// A snapshot of environment variables, name to value.
using EnvironmentMap = std::map<std::string, std::string>;

/// Copies the process environment. The only place ddp reads it.
EnvironmentMap capture_environment();

/// Set by `ddprun --recovery memory` (Note [Recovery in memory] in
/// ddp/elastic/run.hpp): HOST:PORT of the store that outlives the workers,
/// where each generation of the job's group meets.
inline constexpr const char* kRecoveryStoreVariable = "DDP_RECOVERY_STORE";
/// Set beside it: the generation the worker was started into (0, then one
/// more for every worker the launcher replaced).
inline constexpr const char* kRecoveryGenerationVariable = "DDP_RECOVERY_GENERATION";
/// Set beside it: a file in which the launcher keeps "<count> HOST:PORT",
/// the recovery store's address, rewritten with a higher count when the
/// store moves to another node (Note [A new host] in
/// src/launch/node_rendezvous.hpp).
inline constexpr const char* kRecoveryStoreFileVariable = "DDP_RECOVERY_STORE_FILE";
/// Set by `ddprun --spares K` in a hot spare, instead of RANK and
/// WORLD_SIZE: the spare's id (Note [A spare waits for a seat] in
/// ddp/elastic/run.hpp). init() refuses to start a group in a spare.
inline constexpr const char* kSpareVariable = "DDP_SPARE";

/// Set by torchrun: "True" when its agent hosts the rendezvous store at
/// MASTER_ADDR:MASTER_PORT, so that no worker may host one there (torchrun
/// 2.x by default, in every launch mode; 1.x with its static rendezvous).
/// ddprun sets "False". Note [Joining torchrun's store] in src/comm/init.cpp.
inline constexpr const char* kAgentStoreVariable = "TORCHELASTIC_USE_AGENT_STORE";
/// Set by torchrun and ddprun: how many times the job was restarted (0 in its
/// first run).
inline constexpr const char* kRestartCountVariable = "TORCHELASTIC_RESTART_COUNT";

/// The default rendezvous port, as torchrun's.
inline constexpr int kDefaultMasterPort = 29500;

/// Where this process sits in the job, fully resolved and validated.
struct Topology {
  /// Global rank, 0 <= rank < world_size.
  int rank = 0;
  /// Number of processes in the job.
  int world_size = 1;
  /// Rank among the processes on this node.
  int local_rank = 0;
  /// Number of processes on this node.
  int local_world_size = 1;
  /// Index of this node (torchrun's GROUP_RANK, Slurm's SLURM_NODEID).
  int group_rank = 0;
  /// Host of the rendezvous store (rank 0's address).
  std::string master_addr = "127.0.0.1";
  /// Port of the rendezvous store.
  int master_port = kDefaultMasterPort;
  /// Which launcher's variables described this process.
  LaunchSource source = LaunchSource::kNone;
  /// Whether the launcher's agent hosts the rendezvous store at
  /// master_addr:master_port (TORCHELASTIC_USE_AGENT_STORE=True): every rank,
  /// rank 0 included, then joins it as a client. False when an override
  /// moves the store elsewhere.
  bool agent_store = false;
  /// How many times the launcher restarted the job
  /// (TORCHELASTIC_RESTART_COUNT; 0 without it).
  int restart_count = 0;
};

/// Explicit values that take precedence over the environment. Unset fields
/// come from the environment.
struct TopologyOverrides {
  std::optional<int> rank;                 ///< Overrides the launcher's rank.
  std::optional<int> world_size;           ///< Overrides the world size.
  std::optional<int> local_rank;           ///< Overrides the local rank.
  std::optional<int> local_world_size;     ///< Overrides the local world size.
  std::optional<std::string> master_addr;  ///< Overrides MASTER_ADDR.
  std::optional<int> master_port;          ///< Overrides MASTER_PORT.
};

/// Resolves the topology from launcher variables and overrides, in this
/// order of precedence: overrides, torchrun, Open MPI, Slurm; with none of
/// them a single process (world size 1, no network).
/// \throws ConfigError naming the variable, its value and the fix when a
///   value is missing, not a number, out of range or inconsistent.
Topology resolve_topology(const EnvironmentMap& env, const TopologyOverrides& overrides = {});

}  // namespace ddp::comm

namespace ddp {
using namespace comm;  // Note [One namespace per layer] in ddp/ddp.hpp
}  // namespace ddp

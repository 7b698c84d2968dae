#pragma once

/// \file init.hpp
/// Starting a process group from a launcher's environment.
///
/// \code
///   auto group = ddp::init();  // torchrun, ddprun, mpirun, srun or alone
///   torch::Tensor t = torch::ones({4}) * group->rank();
///   group->all_reduce(t, ddp::ReduceOp::kSum);
/// \endcode
///
/// This header only declares ProcessGroup; calling the group's methods takes
/// ddp/comm/process_group.hpp (or the umbrella ddp/comm.hpp or ddp/ddp.hpp).

#include <torch/arg.h>
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <memory>
#include <optional>
#include <string>

#include "ddp/comm/environment.hpp"

namespace ddp::comm {

class ProcessGroup;

/// Options of ddp::init(). Unset topology fields come from the environment;
/// set ones override it.
struct InitOptions {
  /// "gloo" (CPU tensors; CUDA tensors staged through the host), "shm" (CPU
  /// tensors of ranks on one node, through shared memory), "nccl" (CUDA
  /// tensors; needs a CUDA LibTorch) or "auto": NCCL for CUDA tensors where
  /// available; for the rest shm when every rank is on one node, otherwise
  /// shm within each node and Gloo between nodes (hierarchical).
  TORCH_ARG(std::string, backend) = "auto";
  /// This process's rank; overrides RANK and its equivalents.
  TORCH_ARG(std::optional<int>, rank) = std::nullopt;
  /// The number of processes; overrides WORLD_SIZE and its equivalents.
  TORCH_ARG(std::optional<int>, world_size) = std::nullopt;
  /// Rank on this node; overrides LOCAL_RANK and its equivalents.
  TORCH_ARG(std::optional<int>, local_rank) = std::nullopt;
  /// Processes on this node; overrides LOCAL_WORLD_SIZE and its equivalents.
  TORCH_ARG(std::optional<int>, local_world_size) = std::nullopt;
  /// Host of rank 0's rendezvous store; overrides MASTER_ADDR.
  TORCH_ARG(std::optional<std::string>, master_addr) = std::nullopt;
  /// Port of rank 0's rendezvous store; overrides MASTER_PORT.
  TORCH_ARG(std::optional<int>, master_port) = std::nullopt;
  /// How long to wait for the master and for every rank to join.
  TORCH_ARG(std::chrono::milliseconds, rendezvous_timeout) = std::chrono::minutes(5);
  /// How long one collective may take before it fails (PyTorch's default).
  TORCH_ARG(std::chrono::milliseconds, collective_timeout) = std::chrono::minutes(30);
  /// Network interface for Gloo; overrides GLOO_SOCKET_IFNAME. Empty: the
  /// interface that routes to the master.
  TORCH_ARG(std::string, gloo_interface) = "";
  /// A store the ranks meet in instead of rank 0's (PyTorch's
  /// init_process_group(store=...)): every rank passes a client of the same
  /// store, nothing listens on MASTER_PORT (MASTER_ADDR still picks the
  /// interface Gloo uses), and the group's keys go straight into it (wrap
  /// it in a c10d::PrefixStore to keep groups apart). Null: rank 0 hosts
  /// one at MASTER_ADDR:MASTER_PORT.
  TORCH_ARG(c10::intrusive_ptr<c10d::Store>, store) = {};
};

/// Starts this process's process group: resolves the topology from the
/// environment and `options`, meets the other ranks at rank 0's store (hosted
/// by rank 0, bound to the master address only) or at InitOptions::store,
/// and starts the backend. With world size 1 and no store nothing touches the
/// network. SIGPIPE is ignored from then on, unless the program handles it
/// (Note [A dead peer is an error, not a signal] in src/comm/init.cpp).
/// \throws ConfigError for bad options or environment variables,
///   RendezvousError when the ranks cannot meet, BackendUnavailableError for a
///   backend this build lacks.
std::shared_ptr<ProcessGroup> init(const InitOptions& options = {});

/// As init(options), with the environment given explicitly (for tests and
/// embedding); the process environment is not read.
std::shared_ptr<ProcessGroup> init(const InitOptions& options, const EnvironmentMap& env);

}  // namespace ddp::comm

namespace ddp {
using namespace comm;  // Note [One namespace per layer] in ddp/ddp.hpp
}  // namespace ddp

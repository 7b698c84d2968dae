#pragma once

// Internal: the backends ddp can run a process group on. Each lives in its
// own file behind ddp::ProcessGroup; which files are compiled is decided by
// cmake/DdpBackends.cmake, never by #if in the collective logic.

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "base/compat/torch_compat.hpp"
#include "ddp/comm/environment.hpp"
#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::comm::backends {

/// What every backend needs to start: who we are, where to meet, how long a
/// collective may take.
struct BackendContext {
  Topology topology;
  base::compat::StorePtr store;
  std::chrono::milliseconds collective_timeout{0};
  /// Network interface for Gloo (GLOO_SOCKET_IFNAME); empty: the interface
  /// that routes to the master.
  std::string gloo_interface;
};

/// Gloo: CPU tensors (and CUDA tensors, staged through the host).
std::shared_ptr<ProcessGroup> make_gloo_process_group(const BackendContext& context);

/// NCCL: CUDA tensors. Throws BackendUnavailableError in builds without it.
std::shared_ptr<ProcessGroup> make_nccl_process_group(const BackendContext& context);

/// Whether this build carries the NCCL backend.
bool nccl_compiled_in() noexcept;

/// The job's ranks grouped by node (Note [What counts as one node]), each
/// node's ranks ascending, nodes in order of their lowest rank. Collective:
/// every rank calls it once, through the store.
std::vector<std::vector<int>> group_ranks_by_node(const BackendContext& context);

/// `shm`: CPU tensors (others staged through host memory) through POSIX
/// shared memory. Throws ConfigError unless `nodes` is a single node.
std::shared_ptr<ProcessGroup> make_shm_process_group(const BackendContext& context,
                                                     const std::vector<std::vector<int>>& nodes);

/// Several nodes: shared memory within each, Gloo between their leaders.
std::shared_ptr<ProcessGroup> make_hierarchical_process_group(
    const BackendContext& context, const std::vector<std::vector<int>>& nodes);

/// `auto`: NCCL for CUDA tensors when available; the rest through shared
/// memory when every rank is on one node, hierarchically when not.
std::shared_ptr<ProcessGroup> make_auto_process_group(const BackendContext& context);

}  // namespace ddp::comm::backends

#pragma once

// Internal: the engines ddp can run a process group on. Each lives in its
// own file behind ddp::ProcessGroup; which files are compiled is decided by
// cmake/DdpBackends.cmake, never by #if in the collective logic.

#include <chrono>
#include <memory>
#include <string>

#include "compat/torch_compat.hpp"
#include "ddp/process_group.hpp"

namespace ddp::backends {

/// What every engine needs to start: who we are, where to meet, how long a
/// collective may take.
struct BackendContext {
  Topology topology;
  compat::StorePtr store;
  std::chrono::milliseconds collective_timeout{0};
  /// Network interface for Gloo (GLOO_SOCKET_IFNAME); empty: the interface
  /// that routes to the master.
  std::string gloo_interface;
};

/// Gloo: CPU tensors (and CUDA tensors, staged through the host).
std::shared_ptr<ProcessGroup> makeGlooProcessGroup(const BackendContext& context);

/// NCCL: CUDA tensors. Throws BackendUnavailableError in builds without it.
std::shared_ptr<ProcessGroup> makeNcclProcessGroup(const BackendContext& context);

/// Whether this build carries the NCCL engine.
bool ncclCompiledIn() noexcept;

/// `auto`: NCCL for CUDA tensors when available, Gloo for the rest.
std::shared_ptr<ProcessGroup> makeAutoProcessGroup(const BackendContext& context);

}  // namespace ddp::backends

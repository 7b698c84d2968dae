#pragma once

// Internal: what the shared-memory backends share: the ranks of each node,
// collectives described for errors, and a group running on its own thread.

#include <memory>
#include <vector>

#include "comm/backends/backends.hpp"
#include "comm/shm/communicator.hpp"
#include "comm/shm/serial_executor.hpp"
#include "comm/work_impl.hpp"
#include "ddp/comm/process_group.hpp"

namespace ddp::comm::backends {

/// A ProcessGroup whose collectives run one after another on a worker
/// thread (the backend's calls are blocking).
class SerialProcessGroup : public ProcessGroup {
 protected:
  /// `backend` names the backend in messages ("shm", "hierarchical").
  SerialProcessGroup(const BackendContext& context, std::string backend)
      : ProcessGroup(context.topology, context.collective_timeout), backend_(std::move(backend)) {}

  /// Runs `task` on the worker thread; errors name `info`.
  Work submit(const detail::CollectiveInfo& info, std::function<void()> task);

  /// Drains and stops the worker thread; derived destructors call it before
  /// their members (which the queued tasks use) go away.
  void stop_worker() { executor_.stop(); }

  /// What an error about this collective names. The backend enforces the
  /// timeout itself (Note [One clock decides a timeout]).
  detail::CollectiveInfo info(const char* name, const at::Tensor& tensor,
                              std::optional<ReduceOp> op = std::nullopt) const;

  /// How the node communicator names `info` in its errors.
  static shm::Describe describing(detail::CollectiveInfo info) {
    return [info = std::move(info)] { return info.describe(); };
  }

 private:
  std::string backend_;
  shm::SerialExecutor executor_;
};

/// The node communicator for `node_ranks` (job ranks, ascending), which
/// must contain this rank; meets through `store`.
std::unique_ptr<shm::Communicator> make_node_communicator(const BackendContext& context,
                                                          const std::vector<int>& node_ranks,
                                                          const base::compat::StorePtr& store);

}  // namespace ddp::comm::backends

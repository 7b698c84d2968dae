#pragma once

// Internal: a ddp::ProcessGroup that forwards to one c10d backend.

#include <optional>
#include <string>

#include "comm/backends/backends.hpp"
#include "comm/work_impl.hpp"
#include "ddp/comm/process_group.hpp"

namespace ddp::comm::backends {

/// Forwards each collective to the backend's native implementation. Backends
/// that lack one (Gloo in LibTorch 1.13 has no average, no bfloat16 and no
/// reduce-scatter) override the corresponding do...() method.
class C10dProcessGroup : public ProcessGroup {
 public:
  /// `backend_enforces_timeout`: the backend aborts a collective that outlives
  /// the group's timeout by itself (NCCL's watchdog), so waiting on its Work
  /// sets no timer (Note [NCCL's wait leaves the host free]).
  C10dProcessGroup(const BackendContext& context, base::compat::BackendPtr backend,
                   std::string name, bool backend_enforces_timeout = false);

  std::string backend_name() const override { return name_; }

 protected:
  Work do_all_reduce(const at::Tensor& tensor, ReduceOp op) override;
  Work do_broadcast(const at::Tensor& tensor, int root) override;
  Work do_all_gather(const at::Tensor& output, const at::Tensor& input) override;
  Work do_reduce_scatter(const at::Tensor& output, const at::Tensor& input, ReduceOp op) override;
  Work do_barrier() override;

  /// Broadcast / all-gather of `moved`, a bit-for-bit view of the caller's
  /// tensor in a dtype the backend can carry; errors name `described`.
  Work broadcast_as(const at::Tensor& described, const at::Tensor& moved, int root);
  Work all_gather_as(const at::Tensor& described, const at::Tensor& output,
                     const at::Tensor& input);

  /// What an error about this collective will name.
  detail::CollectiveInfo info(const char* name, const at::Tensor& tensor,
                              std::optional<ReduceOp> op = std::nullopt) const;
  base::compat::Backend& backend() { return *backend_; }
  static c10d::ReduceOp to_c10d(ReduceOp op);

 private:
  base::compat::BackendPtr backend_;
  std::string name_;
  bool backend_enforces_timeout_;
};

}  // namespace ddp::comm::backends

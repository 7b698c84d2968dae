// `auto`: one process group over two backends, chosen per tensor: NCCL for
// CUDA tensors where this build and machine have it, and for everything else
// shared memory when all ranks share a node, shared memory within nodes and
// Gloo between them when they do not. The backends meet through the same
// store under different prefixes.

#include <ATen/Context.h>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include "comm/backends/backends.hpp"
#include "ddp/comm/process_group.hpp"

namespace ddp::comm::backends {
namespace {

class AutoProcessGroup final : public ProcessGroup {
 public:
  AutoProcessGroup(const BackendContext& context, std::shared_ptr<ProcessGroup> cpu,
                   std::shared_ptr<ProcessGroup> cuda)
      : ProcessGroup(context.topology, context.collective_timeout),
        cpu_(std::move(cpu)),
        cuda_(std::move(cuda)) {}

  std::string backend_name() const override {
    return "auto(" + cpu_->backend_name() + (cuda_ ? "," + cuda_->backend_name() : "") + ")";
  }

 protected:
  Work do_all_reduce(const at::Tensor& tensor, ReduceOp op) override {
    return backend_for(tensor).all_reduce_async(tensor, op);
  }
  Work do_broadcast(const at::Tensor& tensor, int root) override {
    return backend_for(tensor).broadcast_async(tensor, root);
  }
  Work do_all_gather(const at::Tensor& output, const at::Tensor& input) override {
    return backend_for(input).all_gather_async(output, input);
  }
  Work do_reduce_scatter(const at::Tensor& output, const at::Tensor& input, ReduceOp op) override {
    return backend_for(input).reduce_scatter_async(output, input, op);
  }
  Work do_barrier() override { return cpu_->barrier_async(); }

 private:
  ProcessGroup& backend_for(const at::Tensor& tensor) {
    return (cuda_ && tensor.is_cuda()) ? *cuda_ : *cpu_;
  }

  std::shared_ptr<ProcessGroup> cpu_;
  std::shared_ptr<ProcessGroup> cuda_;
};

BackendContext with_prefix(const BackendContext& context, const std::string& prefix) {
  BackendContext prefixed = context;
  prefixed.store = c10::make_intrusive<c10d::PrefixStore>(prefix, context.store);
  return prefixed;
}

}  // namespace

std::shared_ptr<ProcessGroup> make_auto_process_group(const BackendContext& context) {
  const auto nodes = group_ranks_by_node(context);
  auto cpu = nodes.size() == 1 ? make_shm_process_group(context, nodes)
                               : make_hierarchical_process_group(context, nodes);
  std::shared_ptr<ProcessGroup> cuda;
  if (nccl_compiled_in() && at::hasCUDA())
    cuda = make_nccl_process_group(with_prefix(context, "nccl"));
  return std::make_shared<AutoProcessGroup>(context, std::move(cpu), std::move(cuda));
}

}  // namespace ddp::comm::backends

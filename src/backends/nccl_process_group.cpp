// NCCL: the GPU engine from a CUDA LibTorch's c10d. Compiled only where
// LibTorch carries it (cmake/DdpBackends.cmake); NCCL supports every
// collective and dtype ddp offers natively.
//
// Note [CPU tensors on the NCCL engine]
// NCCL moves only CUDA tensors, and c10d's engine rejects others ("Tensors
// must be CUDA and dense"). A job on backend "nccl" still exchanges small CPU
// tensors: DistributedDataParallel's check that every rank holds the same
// parameters, a GradScaler's overflow flag on a CPU model, a user's
// metrics. Such tensors are staged through the current CUDA device: copied
// there, reduced, and copied back when the collective completes, so that the
// caller sees the same semantics as on Gloo. CUDA tensors go straight to
// NCCL.

#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "backends/c10d_process_group.hpp"

namespace ddp::backends {
namespace {

at::Tensor staged(const at::Tensor& t) { return t.to(at::Device(at::kCUDA)); }

class NcclProcessGroup final : public C10dProcessGroup {
 public:
  using C10dProcessGroup::C10dProcessGroup;

 protected:
  Work do_all_reduce(const at::Tensor& tensor, ReduceOp op) override {
    if (tensor.is_cuda()) return C10dProcessGroup::do_all_reduce(tensor, op);
    at::Tensor buffer = staged(tensor);
    return detail::startCollective(
        info("all_reduce", tensor, op),
        [&] {
          std::vector<at::Tensor> tensors{buffer};
          c10d::AllreduceOptions options;
          options.reduceOp = toC10d(op);
          options.timeout = collective_timeout();
          return engine().allreduce(tensors, options);
        },
        [tensor, buffer] { tensor.copy_(buffer); });
  }

  Work do_broadcast(const at::Tensor& tensor, int root) override {
    if (tensor.is_cuda()) return C10dProcessGroup::do_broadcast(tensor, root);
    at::Tensor buffer = staged(tensor);
    return detail::startCollective(
        info("broadcast", tensor),
        [&] {
          std::vector<at::Tensor> tensors{buffer};
          c10d::BroadcastOptions options;
          options.rootRank = root;
          options.timeout = collective_timeout();
          return engine().broadcast(tensors, options);
        },
        [tensor, buffer] { tensor.copy_(buffer); });
  }

  Work do_all_gather(const at::Tensor& output, const at::Tensor& input) override {
    if (output.is_cuda() && input.is_cuda()) return C10dProcessGroup::do_all_gather(output, input);
    at::Tensor output_buffer = at::empty(output.sizes(), output.options().device(at::kCUDA));
    at::Tensor input_buffer = staged(input);
    return detail::startCollective(
        info("all_gather", input),
        [&] {
          c10d::AllgatherOptions options;
          options.timeout = collective_timeout();
          return engine()._allgather_base(output_buffer, input_buffer, options);
        },
        [output, output_buffer] { output.copy_(output_buffer); });
  }

  Work do_reduce_scatter(const at::Tensor& output, const at::Tensor& input, ReduceOp op) override {
    if (output.is_cuda() && input.is_cuda()) {
      return C10dProcessGroup::do_reduce_scatter(output, input, op);
    }
    at::Tensor output_buffer = at::empty(output.sizes(), output.options().device(at::kCUDA));
    at::Tensor input_buffer = staged(input);
    return detail::startCollective(
        info("reduce_scatter", output, op),
        [&] {
          c10d::ReduceScatterOptions options;
          options.reduceOp = toC10d(op);
          options.timeout = collective_timeout();
          at::Tensor flat_output = output_buffer.view({-1});
          at::Tensor flat_input = input_buffer.view({-1});
          return engine()._reduce_scatter_base(flat_output, flat_input, options);
        },
        [output, output_buffer] { output.copy_(output_buffer); });
  }
};

}  // namespace

bool ncclCompiledIn() noexcept { return true; }

std::shared_ptr<ProcessGroup> makeNcclProcessGroup(const BackendContext& context) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = context.collective_timeout;
  auto engine = c10::make_intrusive<c10d::ProcessGroupNCCL>(context.store, context.topology.rank,
                                                            context.topology.world_size, options);
  return std::make_shared<NcclProcessGroup>(context, std::move(engine), "nccl");
}

}  // namespace ddp::backends

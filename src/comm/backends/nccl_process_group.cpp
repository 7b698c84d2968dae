// NCCL: the GPU backend from a CUDA LibTorch's c10d. Compiled only where
// LibTorch carries it (cmake/DdpBackends.cmake); NCCL supports every
// collective and dtype ddp offers natively.
//
// Note [CPU tensors on the NCCL backend]
// NCCL moves only CUDA tensors, and c10d's backend rejects others ("Tensors
// must be CUDA and dense"). A job on backend "nccl" still exchanges small CPU
// tensors: DistributedDataParallel's check that every rank holds the same
// parameters, a GradScaler's overflow flag on a CPU model, a user's
// metrics. Such tensors are staged through the current CUDA device: copied
// there, reduced, and copied back when the collective completes, so that the
// caller sees the same semantics as on Gloo. CUDA tensors go straight to
// NCCL.

//
// Note [NCCL's wait leaves the host free]
// c10d's WorkNCCL::wait(timeout) makes the caller's CUDA stream wait for the
// collective and, when given a timeout (LibTorch 2.x), also blocks the host
// thread, polling the collective's event with 1 ms sleeps until it is done:
// one host synchronization per bucket, and up to a millisecond lost each
// time, in what should be a step the host only enqueues. Without a timeout
// it is stream-ordered only. The group's timeout still holds: the backend
// was created with it, and c10d's watchdog aborts a collective that outlives
// it. So ddp waits on NCCL's Work without a timeout (backend_enforces_timeout
// in Note [One clock decides a timeout]). A CPU tensor staged through the
// GPU is still complete when wait() returns: its copy back to the host
// follows the collective on the stream and blocks until it is done.

#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "comm/backends/c10d_process_group.hpp"

namespace ddp::comm::backends {
namespace {

at::Tensor staged(const at::Tensor& t) { return t.to(at::Device(at::kCUDA)); }

class NcclProcessGroup final : public C10dProcessGroup {
 public:
  NcclProcessGroup(const BackendContext& context, base::compat::BackendPtr backend)
      : C10dProcessGroup(context, std::move(backend), "nccl", /*backend_enforces_timeout=*/true) {}

 protected:
  Work do_all_reduce(const at::Tensor& tensor, ReduceOp op) override {
    if (tensor.is_cuda()) return C10dProcessGroup::do_all_reduce(tensor, op);
    at::Tensor buffer = staged(tensor);
    return detail::start_collective(
        info("all_reduce", tensor, op),
        [&] {
          std::vector<at::Tensor> tensors{buffer};
          c10d::AllreduceOptions options;
          options.reduceOp = to_c10d(op);
          options.timeout = collective_timeout();
          return backend().allreduce(tensors, options);
        },
        [tensor, buffer] { tensor.copy_(buffer); });
  }

  Work do_broadcast(const at::Tensor& tensor, int root) override {
    if (tensor.is_cuda()) return C10dProcessGroup::do_broadcast(tensor, root);
    at::Tensor buffer = staged(tensor);
    return detail::start_collective(
        info("broadcast", tensor),
        [&] {
          std::vector<at::Tensor> tensors{buffer};
          c10d::BroadcastOptions options;
          options.rootRank = root;
          options.timeout = collective_timeout();
          return backend().broadcast(tensors, options);
        },
        [tensor, buffer] { tensor.copy_(buffer); });
  }

  Work do_all_gather(const at::Tensor& output, const at::Tensor& input) override {
    if (output.is_cuda() && input.is_cuda()) return C10dProcessGroup::do_all_gather(output, input);
    at::Tensor output_buffer = at::empty(output.sizes(), output.options().device(at::kCUDA));
    at::Tensor input_buffer = staged(input);
    return detail::start_collective(
        info("all_gather", input),
        [&] {
          c10d::AllgatherOptions options;
          options.timeout = collective_timeout();
          return backend()._allgather_base(output_buffer, input_buffer, options);
        },
        [output, output_buffer] { output.copy_(output_buffer); });
  }

  Work do_reduce_scatter(const at::Tensor& output, const at::Tensor& input, ReduceOp op) override {
    if (output.is_cuda() && input.is_cuda()) {
      return C10dProcessGroup::do_reduce_scatter(output, input, op);
    }
    at::Tensor output_buffer = at::empty(output.sizes(), output.options().device(at::kCUDA));
    at::Tensor input_buffer = staged(input);
    return detail::start_collective(
        info("reduce_scatter", output, op),
        [&] {
          c10d::ReduceScatterOptions options;
          options.reduceOp = to_c10d(op);
          options.timeout = collective_timeout();
          at::Tensor flat_output = output_buffer.view({-1});
          at::Tensor flat_input = input_buffer.view({-1});
          return backend()._reduce_scatter_base(flat_output, flat_input, options);
        },
        [output, output_buffer] { output.copy_(output_buffer); });
  }
};

}  // namespace

bool nccl_compiled_in() noexcept { return true; }

std::shared_ptr<ProcessGroup> make_nccl_process_group(const BackendContext& context) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = context.collective_timeout;
  auto backend = c10::make_intrusive<c10d::ProcessGroupNCCL>(context.store, context.topology.rank,
                                                             context.topology.world_size, options);
  return std::make_shared<NcclProcessGroup>(context, std::move(backend));
}

}  // namespace ddp::comm::backends

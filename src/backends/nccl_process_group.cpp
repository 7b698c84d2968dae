// NCCL: the GPU engine from a CUDA LibTorch's c10d. Compiled only where
// LibTorch carries it (cmake/DdpBackends.cmake); NCCL supports every
// collective and dtype ddp offers natively, so no gaps need filling.

#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

#include "backends/c10d_process_group.hpp"

namespace ddp::backends {

bool ncclCompiledIn() noexcept { return true; }

std::shared_ptr<ProcessGroup> makeNcclProcessGroup(const BackendContext& context) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = context.collective_timeout;
  auto engine = c10::make_intrusive<c10d::ProcessGroupNCCL>(
      context.store, context.topology.rank, context.topology.world_size, options);
  return std::make_shared<C10dProcessGroup>(context, std::move(engine), "nccl");
}

}  // namespace ddp::backends

// The nccl backend in builds whose LibTorch has no NCCL (Debian's LibTorch
// is CPU-only): asking for it is an error that says what to do instead.

#include <torch/version.h>

#include "comm/backends/backends.hpp"
#include "ddp/base/errors.hpp"

namespace ddp::comm::backends {

bool nccl_compiled_in() noexcept { return false; }

std::shared_ptr<ProcessGroup> make_nccl_process_group(const BackendContext&) {
  throw BackendUnavailableError(
      std::string("backend 'nccl' is not available: this ddp was built against LibTorch ") +
      TORCH_VERSION +
      " without CUDA/NCCL. Use backend 'gloo' (or 'auto', which picks Gloo "
      "for CPU tensors), or rebuild ddp against a CUDA build of LibTorch.");
}

}  // namespace ddp::comm::backends

#pragma once

// Internal: the last step of an all-reduce with ReduceOp::kAverage on the
// backends that sum first (gloo, hierarchical).

#include <ATen/ATen.h>

namespace ddp::comm::backends {

/// Divides the summed `t` in place by the world size, as PyTorch's AVG does:
/// integral tensors round toward zero, floating tensors divide exactly.
inline void divide_by_world_size(const at::Tensor& t, int world_size) {
  if (at::isIntegralType(t.scalar_type(), /*includeBool=*/false)) {
    t.div_(world_size, "trunc");
  } else {
    t.div_(world_size);
  }
}

}  // namespace ddp::comm::backends

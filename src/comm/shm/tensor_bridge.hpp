#pragma once

// Internal: from tensors and ddp's reduce ops to the shared-memory backend's
// raw buffers, element types and combine kinds.

#include <ATen/core/Tensor.h>

#include "comm/shm/reduce_kernels.hpp"
#include "ddp/comm/reduce_op.hpp"

namespace ddp::comm::shm {

/// The backend's element type for a (validated) dtype.
ElementType element_type_of(c10::ScalarType dtype);

/// How `op` combines values (an average is a sum, divided afterwards).
Combine combine_of(ReduceOp op);

/// The bytes the backend works on for `tensor`: the tensor itself when it is
/// in host memory, otherwise a host copy that copy_back() returns to it.
class HostStaging {
 public:
  explicit HostStaging(const at::Tensor& tensor);
  void* data() const { return host_.data_ptr(); }
  const at::Tensor& host() const { return host_; }
  /// Copies the host result into the original tensor (no-op for host ones).
  void copy_back() const;

 private:
  at::Tensor original_;
  at::Tensor host_;
};

}  // namespace ddp::comm::shm

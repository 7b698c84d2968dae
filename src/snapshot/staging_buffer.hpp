#pragma once

// Internal: the staging buffer of an asynchronous save (Note [An asynchronous
// save] in ddp/snapshot/snapshot_manager.hpp): CPU copies of a state's
// records, taken on the training thread, which the background thread writes
// while training changes the live tensors.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <map>
#include <string>

#include "snapshot/snapshot_writing.hpp"

namespace ddp::snapshot::detail {

/// CPU copies of named tensors, in buffers kept from one stage() to the next.
class StagingBuffer {
 public:
  /// Copies `records` (dense tensors on any device) into contiguous CPU
  /// buffers and returns them under the same names, in the same order. A
  /// record's buffer is reused when the previous call staged the same name
  /// with the same shape, dtype and memory kind; the other buffers are
  /// dropped. CUDA tensors go to pinned memory by non-blocking copies, and
  /// each device's current stream is synchronized before returning. The
  /// returned tensors alias the buffers: they stay valid until the next
  /// stage(). \throws SnapshotError for a tensor no snapshot can hold.
  NamedTensors stage(const NamedTensors& records);

  /// Bytes the buffers hold.
  int64_t bytes() const;

  /// Buffers allocated since construction (a steady-state stage() adds none).
  int64_t allocations() const { return allocations_; }

 private:
  struct Buffer {
    at::Tensor tensor;
    bool pinned = false;
  };
  std::map<std::string, Buffer> buffers_;
  int64_t allocations_ = 0;
};

}  // namespace ddp::snapshot::detail

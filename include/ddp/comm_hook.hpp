#pragma once

/// \file comm_hook.hpp
/// Communication hooks: how DistributedDataParallel reduces one bucket of
/// gradients (PyTorch's register_comm_hook).

#include <ATen/core/Tensor.h>

#include <memory>
#include <string>

#include "ddp/process_group.hpp"
#include "ddp/work.hpp"

namespace ddp {

/// Reduces one bucket of gradients across the ranks of a group.
///
/// `reduce()` is called during backward, as soon as every gradient of the
/// bucket is ready, with `bucket` holding this rank's gradients flattened
/// (one dtype, one device). When the returned Work completes, `bucket` must
/// hold the average of all ranks' gradients in the bucket's dtype. Buckets
/// are handed over in the same order on every rank.
class CommHook {
 public:
  virtual ~CommHook() = default;
  /// Starts reducing `bucket` over `group`; see the class comment.
  virtual Work reduce(ProcessGroup& group, const at::Tensor& bucket) = 0;
  /// A short name for logs ("allreduce", "fp16_compress", ...).
  virtual std::string name() const = 0;
};

/// The default: divide by the world size, all-reduce with a sum.
std::shared_ptr<CommHook> all_reduce_hook();

/// Sends float16: the bucket is cast to float16 (after dividing by the
/// world size, so the sum stays in range), all-reduced, and cast back into
/// the bucket's dtype. Halves the bytes on the wire.
std::shared_ptr<CommHook> fp16_compress_hook();

/// As fp16_compress_hook() with bfloat16: less precision, float32's range.
std::shared_ptr<CommHook> bf16_compress_hook();

}  // namespace ddp

#pragma once

/// \file comm_hook.hpp
/// Communication hooks: how DistributedDataParallel reduces one bucket of
/// gradients (PyTorch's register_comm_hook).

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "ddp/comm/process_group_fwd.hpp"
#include "ddp/comm/work.hpp"

namespace ddp::parallel {

/// One bucket of gradients as a comm hook sees it (PyTorch's GradBucket).
struct GradBucket {
  /// The bucket's position in launch order, the same on every rank. Buckets
  /// are regrouped once, after the first synchronized iteration, so a hook
  /// that keeps state per bucket must check that the layout is unchanged.
  size_t index = 0;
  /// This rank's gradients back to back (one dtype, one device).
  at::Tensor buffer;
  /// Each parameter's gradient: a view into `buffer` with the parameter's
  /// shape, in the order they lie in `buffer`.
  std::vector<at::Tensor> gradients;
  /// Whether this is the last bucket of the iteration.
  bool is_last = false;
};

/// Reduces one bucket of gradients across the ranks of a group.
///
/// `reduce()` is called during backward, as soon as every gradient of the
/// bucket is ready, in the same bucket order on every rank. When the
/// returned Work completes, `bucket.buffer` must hold the average of all
/// ranks' gradients (or the hook's approximation of it) in its own dtype.
/// Work::then() callbacks run on the thread that waits, in bucket order on
/// every rank, so a hook may issue further collectives there.
class CommHook {
 public:
  virtual ~CommHook() = default;
  /// Starts reducing `bucket` over `group`; see the class comment.
  virtual Work reduce(ProcessGroup& group, const GradBucket& bucket) = 0;
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

}  // namespace ddp::parallel

namespace ddp {
using namespace parallel;  // Note [One namespace per layer] in ddp/ddp.hpp
}  // namespace ddp

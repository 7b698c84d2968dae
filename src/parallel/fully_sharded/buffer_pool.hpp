#pragma once

// Internal: the unit-sized host buffers FullyShardedDataParallel takes and
// gives back in every step, kept for the next (Note [Buffers kept between
// steps]).

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>

namespace ddp::parallel::detail {

// Note [Buffers kept between steps]
// Each step a unit takes a buffer for the all-gather (twice, with
// reshard_after_forward), one for its full gradient and one for its
// reduced shard, and frees each soon after. On the host a buffer of more
// than 32 MiB is a fresh mmap each time (glibc's largest threshold), and
// every page of it faults on first touch: on the 51M-parameter MLP of
// benchmarks/fsdp_bench.sh, 166k page faults per step and rank, a tenth of
// the step. So freed buffers come back here and the next request of the
// same size takes one, as CUDA's caching allocator does for GPU memory.
// Each buffer it keeps is a mapping of its own, outside malloc's heap
// (Note [Long-lived buffers outside the heap] in base/mapped_tensor.hpp).
// What the pool keeps free plus what is taken never exceeds the most ever
// taken at once: a miss frees kept buffers first, so the peak RSS stays
// that of freeing at once (a buffer counts as taken until its last tensor
// goes, a backend's reference included: ddp's own collectives drop theirs
// before wait() returns, Note [A collective lets go of its tensors] in
// comm/backends/gloo_backend.cpp, and c10d's may hold theirs longer); between
// steps the kept buffers are that peak (FullyShardedMemory::cached_bytes),
// given back by release().
// FullyShardedDataParallelOptions::cache_buffers(false) turns it off. CUDA
// tensors come from CUDA's own caching allocator.
class BufferPool : public std::enable_shared_from_this<BufferPool> {
 public:
  /// `keep`: false frees each buffer given back at once.
  explicit BufferPool(bool keep) : keep_(keep) {}
  /// A contiguous uninitialized tensor of `numel` elements of `options`'
  /// dtype and device; on the host, its bytes come from (and go back to)
  /// the pool.
  at::Tensor empty(int64_t numel, const at::TensorOptions& options);
  /// empty(), filled with zeros.
  at::Tensor zeros(int64_t numel, const at::TensorOptions& options);
  /// Frees every kept buffer, and each one given back before the next
  /// take (a backend may let go of a buffer after wait() returned).
  void release();
  /// Bytes kept, not taken.
  int64_t cached_bytes() const;
  /// The most bytes taken at once (a buffer counts until its last tensor,
  /// a backend's included, lets go of it): kept + taken never exceeds it.
  int64_t peak_taken_bytes() const;
  ~BufferPool();

 private:
  struct Block;
  static void give_back(void* context);
  void* take(size_t bytes);

  const bool keep_;
  bool released_ = false;  // since release(), until the next take: buffers given back are freed
  mutable std::mutex mutex_;
  std::multimap<size_t, void*> free_;  // kept buffers by size
  size_t free_bytes_ = 0;
  size_t taken_bytes_ = 0;
  size_t most_taken_ = 0;  // the most taken at once, the bound on taken + free
};

}  // namespace ddp::parallel::detail

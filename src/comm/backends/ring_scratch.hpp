#pragma once

// Internal: the chunk-sized buffers of GlooBackend's ring reduce-scatter,
// kept between calls (Note [Gloo collectives without a full-size copy]).

#include <ATen/ATen.h>

#include <cstddef>
#include <memory>
#include <mutex>
#include <vector>

#include "base/mapped_tensor.hpp"

namespace ddp::comm::backends {

// Note [The ring's scratch outside the heap]
// The ring runs on Gloo's worker threads, and a buffer malloc gives a
// thread other than the main one comes from that thread's arena, which
// keeps its freed pages: on the transformer of
// benchmarks/fsdp_transformer_bench.cpp (width 1024, 16 blocks, 4 ranks)
// the two worker arenas held 138 MB free, resident, after two steps. So
// the scratch is a mapping (Note [Long-lived buffers outside the heap] in
// base/mapped_tensor.hpp), taken by a call and given back at its end, and
// kept for the next: one chunk per reduce-scatter running at once.
class RingScratch : public std::enable_shared_from_this<RingScratch> {
 public:
  /// A contiguous tensor of `numel` elements of `options`, uninitialized,
  /// whose bytes go back to this scratch when its last reference goes.
  at::Tensor take(int64_t numel, const at::TensorOptions& options) {
    const size_t bytes = static_cast<size_t>(numel) * options.dtype().itemsize();
    at::Tensor buffer;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (auto it = free_.begin(); it != free_.end(); ++it) {
        if (it->nbytes() >= bytes) {
          buffer = std::move(*it);
          free_.erase(it);
          break;
        }
      }
      if (!buffer.defined()) free_.clear();  // smaller than what calls now need
    }
    if (!buffer.defined()) {
      buffer =
          base::detail::mapped_empty(static_cast<int64_t>(bytes), at::TensorOptions(at::kByte));
    }
    std::weak_ptr<RingScratch> home = weak_from_this();
    auto* kept = new at::Tensor(std::move(buffer));
    return at::from_blob(
        kept->data_ptr(), {numel},
        [home, kept](void*) {
          if (auto scratch = home.lock()) {
            std::lock_guard<std::mutex> lock(scratch->mutex_);
            scratch->free_.push_back(std::move(*kept));
          }
          delete kept;
        },
        options);
  }

 private:
  std::mutex mutex_;
  std::vector<at::Tensor> free_;  // byte tensors, each a mapping of its own when large
};

}  // namespace ddp::comm::backends

#include "parallel/fully_sharded/buffer_pool.hpp"

#include <ATen/ATen.h>
#include <c10/core/impl/alloc_cpu.h>

#include "base/mapped_tensor.hpp"

namespace ddp::parallel::detail {
namespace {

// Note [Long-lived buffers outside the heap]: a buffer the pool keeps lives
// for the job, so it is a mapping of its own where it is large enough; one
// freed at once (keep false) is the step's transient, malloc's.
bool mapped(bool keep, size_t bytes) { return keep && bytes >= base::detail::kMappedMinBytes; }

void* allocate(bool keep, size_t bytes) {
  return mapped(keep, bytes) ? base::detail::map_pages(bytes) : c10::alloc_cpu(bytes);
}

void deallocate(bool keep, void* data, size_t bytes) {
  if (mapped(keep, bytes)) {
    munmap(data, bytes);
  } else {
    c10::free_cpu(data);
  }
}

}  // namespace

// A taken buffer's deleter context: where its bytes go back to.
struct BufferPool::Block {
  std::shared_ptr<BufferPool> pool;
  void* data = nullptr;
  size_t bytes = 0;
};

BufferPool::~BufferPool() { release(); }

void* BufferPool::take(size_t bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
  released_ = false;
  if (auto found = free_.find(bytes); found != free_.end()) {
    void* data = found->second;
    free_.erase(found);
    free_bytes_ -= bytes;
    taken_bytes_ += bytes;
    return data;
  }
  // Note [Buffers kept between steps]: a miss first frees kept buffers,
  // largest first, so that taken + kept stays within the most ever taken.
  most_taken_ = std::max(most_taken_, taken_bytes_ + bytes);
  while (!free_.empty() && taken_bytes_ + free_bytes_ + bytes > most_taken_) {
    auto largest = std::prev(free_.end());
    deallocate(keep_, largest->second, largest->first);
    free_bytes_ -= largest->first;
    free_.erase(largest);
  }
  void* data = allocate(keep_, bytes);
  taken_bytes_ += bytes;
  return data;
}

void BufferPool::give_back(void* context) {
  auto* block = static_cast<Block*>(context);
  // The pool may be this block's last owner: it goes once the lock is free.
  std::shared_ptr<BufferPool> pool = std::move(block->pool);
  {
    std::lock_guard<std::mutex> lock(pool->mutex_);
    pool->taken_bytes_ -= block->bytes;
    if (pool->keep_ && !pool->released_) {
      pool->free_.emplace(block->bytes, block->data);
      pool->free_bytes_ += block->bytes;
    } else {
      deallocate(pool->keep_, block->data, block->bytes);
    }
  }
  delete block;
}

at::Tensor BufferPool::empty(int64_t numel, const at::TensorOptions& options) {
  if (options.device().type() != c10::DeviceType::CPU || numel == 0) {
    return at::empty({numel}, options);
  }
  const size_t bytes = static_cast<size_t>(numel) * options.dtype().itemsize();
  auto* block = new Block{shared_from_this(), nullptr, bytes};
  try {
    block->data = take(bytes);
  } catch (...) {
    delete block;
    throw;
  }
  c10::Storage storage(c10::Storage::use_byte_size_t(), bytes,
                       at::DataPtr(block->data, block, &BufferPool::give_back, options.device()),
                       /*allocator=*/nullptr, /*resizable=*/false);
  return at::empty({0}, options.requires_grad(false)).set_(storage, 0, {numel}, {1});
}

at::Tensor BufferPool::zeros(int64_t numel, const at::TensorOptions& options) {
  return empty(numel, options).zero_();
}

void BufferPool::release() {
  std::lock_guard<std::mutex> lock(mutex_);
  for (const auto& [bytes, data] : free_) deallocate(keep_, data, bytes);
  free_.clear();
  free_bytes_ = 0;
  released_ = true;
}

int64_t BufferPool::cached_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(free_bytes_);
}

int64_t BufferPool::peak_taken_bytes() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return static_cast<int64_t>(most_taken_);
}

}  // namespace ddp::parallel::detail

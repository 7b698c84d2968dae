#include "parallel/fully_sharded/mapped_allocations.hpp"

#include <c10/core/CPUAllocator.h>
#include <sys/mman.h>

#include <algorithm>
#include <atomic>
#include <map>
#include <mutex>
#include <unordered_map>

#include "base/compat/torch_compat.hpp"
#include "base/mapped_tensor.hpp"

namespace ddp::parallel::detail {
namespace {

// Inside a MappedAllocations, blocks from kMappedMinBytes are mappings of
// their own; inside a PooledAllocations, they come from the mappings kept;
// every other request goes to the allocator found when installed.
class MappingAllocator final : public base::compat::CpuAllocator {
 public:
  static MappingAllocator& the() {
    // Never destroyed: once installed it stays c10's CPU allocator.
    static auto* allocator = new MappingAllocator();
    return *allocator;
  }

  /// Installs this allocator over c10's CPU allocator (once); false where
  /// an allocator of a higher priority keeps its place.
  bool install() {
    std::lock_guard<std::mutex> lock(install_mutex_);
    c10::Allocator* found = c10::GetCPUAllocator();
    if (found == this) return true;
    found_.store(found);
    found_raw_free_.store(found->raw_deleter());
    c10::SetCPUAllocator(this, /*priority=*/0);
    return c10::GetCPUAllocator() == this;
  }

  void enter() { ++mapped_scopes_; }
  void leave() { --mapped_scopes_; }
  void enter_pooled(size_t keep_bytes) {
    {
      std::lock_guard<std::mutex> lock(blocks().mutex);
      blocks().keep_limit = std::max(blocks().keep_limit, keep_bytes);
    }
    ++pooled_scopes_;
  }
  void leave_pooled() { --pooled_scopes_; }

  c10::DataPtr allocate_bytes(size_t bytes) const override {
    const bool pooled = pooled_scopes_.load() > 0;
    if ((!pooled && mapped_scopes_.load() == 0) || bytes < base::detail::kMappedMinBytes) {
      return found_.load()->allocate(bytes);
    }
    void* data = pooled ? take_kept(bytes) : nullptr;
    if (data == nullptr) {
      data = base::detail::map_pages(bytes);
      std::lock_guard<std::mutex> lock(blocks().mutex);
      blocks().mapped.emplace(data, bytes);
    }
    // Its own pointer as the context: c10's raw_allocate() requires it.
    return {data, data, &free_block, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return found_raw_free_.load() != nullptr ? &free_block : nullptr;
  }

  static void release_kept() {
    std::multimap<size_t, void*> kept;
    {
      std::lock_guard<std::mutex> lock(blocks().mutex);
      kept.swap(blocks().kept);
      blocks().kept_bytes = 0;
      blocks().keep_limit = 0;
    }
    for (const auto& [bytes, data] : kept) munmap(data, bytes);
  }

  static size_t kept_bytes() {
    std::lock_guard<std::mutex> lock(blocks().mutex);
    return blocks().kept_bytes;
  }

 private:
  // The blocks this allocator mapped: those given out by address (their
  // mapping's size), and those kept for the pool by size.
  struct Blocks {
    std::mutex mutex;
    std::unordered_map<void*, size_t> mapped;
    std::multimap<size_t, void*> kept;
    size_t kept_bytes = 0;
    size_t keep_limit = 0;  // the most kept bytes any PooledAllocations asked for
  };
  static Blocks& blocks() {
    static auto* all = new Blocks();
    return *all;
  }

  // The smallest kept block that holds `bytes` and is at most twice as
  // large, taken; null if none.
  static void* take_kept(size_t bytes) {
    std::lock_guard<std::mutex> lock(blocks().mutex);
    const auto found = blocks().kept.lower_bound(bytes);
    if (found == blocks().kept.end() || found->first > 2 * bytes) return nullptr;
    void* data = found->second;
    blocks().mapped.emplace(data, found->first);
    blocks().kept_bytes -= found->first;
    blocks().kept.erase(found);
    return data;
  }

  // Keeps freed block `data` of `bytes` if it fits within the limit, once
  // smaller kept blocks went to make room (the larger serve more requests);
  // false: the caller unmaps it. Under blocks().mutex.
  static bool keep(void* data, size_t bytes) {
    Blocks& all = blocks();
    size_t smaller = 0;  // what may go to make room
    for (auto it = all.kept.begin(); it != all.kept.end() && it->first < bytes; ++it) {
      smaller += it->first;
    }
    if (all.kept_bytes - smaller + bytes > all.keep_limit) return false;
    while (all.kept_bytes + bytes > all.keep_limit) {
      const auto smallest = all.kept.begin();
      munmap(smallest->second, smallest->first);
      all.kept_bytes -= smallest->first;
      all.kept.erase(smallest);
    }
    all.kept.emplace(bytes, data);
    all.kept_bytes += bytes;
    return true;
  }

  // LibTorch's kernels free their scratch through the allocator installed
  // when they free it (raw_deallocate), so one deleter frees both kinds: a
  // block this allocator mapped, found by its address (kept for the pool
  // while it has room), and one the allocator found gave out, before the
  // install or after.
  static void free_block(void* data) {
    size_t bytes = 0;
    {
      std::lock_guard<std::mutex> lock(blocks().mutex);
      const auto found = blocks().mapped.find(data);
      if (found != blocks().mapped.end()) {
        bytes = found->second;
        blocks().mapped.erase(found);
        if (keep(data, bytes)) return;
      }
    }
    if (bytes > 0) {
      munmap(data, bytes);
    } else {
      the().found_raw_free_.load()(data);
    }
  }

  std::mutex install_mutex_;
  std::atomic<c10::Allocator*> found_{nullptr};
  std::atomic<c10::DeleterFnPtr> found_raw_free_{nullptr};
  std::atomic<int> mapped_scopes_{0};  // the MappedAllocations alive, on any thread
  std::atomic<int> pooled_scopes_{0};  // the PooledAllocations alive, on any thread
};

}  // namespace

c10::Allocator* mapping_allocator() { return &MappingAllocator::the(); }

MappedAllocations::MappedAllocations() : active_(MappingAllocator::the().install()) {
  if (active_) MappingAllocator::the().enter();
}

MappedAllocations::~MappedAllocations() {
  if (active_) MappingAllocator::the().leave();
}

PooledAllocations::PooledAllocations(size_t keep_bytes)
    : active_(MappingAllocator::the().install()) {
  if (active_) MappingAllocator::the().enter_pooled(keep_bytes);
}

PooledAllocations::~PooledAllocations() {
  if (active_) MappingAllocator::the().leave_pooled();
}

void release_pooled_blocks() { MappingAllocator::release_kept(); }

size_t pooled_bytes() { return MappingAllocator::kept_bytes(); }

}  // namespace ddp::parallel::detail

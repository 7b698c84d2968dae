#include "parallel/fully_sharded/mapped_allocations.hpp"

#include <c10/core/CPUAllocator.h>
#include <sys/mman.h>

#include <atomic>
#include <mutex>
#include <unordered_map>

#include "base/compat/torch_compat.hpp"
#include "base/mapped_tensor.hpp"

namespace ddp::parallel::detail {
namespace {

// While a scope is alive, blocks from kMappedMinBytes are mappings of their
// own; every other request goes to the allocator found when installed.
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

  void enter() { ++scopes_; }
  void leave() { --scopes_; }

  c10::DataPtr allocate_bytes(size_t bytes) const override {
    if (scopes_.load() == 0 || bytes < base::detail::kMappedMinBytes) {
      return found_.load()->allocate(bytes);
    }
    void* data = base::detail::map_pages(bytes);
    {
      std::lock_guard<std::mutex> lock(mapped_mutex());
      mapped().emplace(data, bytes);
    }
    // Its own pointer as the context: c10's raw_allocate() requires it.
    return {data, data, &free_block, c10::Device(c10::DeviceType::CPU)};
  }

  c10::DeleterFnPtr raw_deleter() const override {
    return found_raw_free_.load() != nullptr ? &free_block : nullptr;
  }

 private:
  // LibTorch's kernels free their scratch through the allocator installed
  // when they free it (raw_deallocate), so one deleter frees both kinds: a
  // block this allocator mapped, found by its address, and one the
  // allocator found gave out, before the install or after.
  static void free_block(void* data) {
    size_t bytes = 0;
    {
      std::lock_guard<std::mutex> lock(mapped_mutex());
      const auto found = mapped().find(data);
      if (found != mapped().end()) {
        bytes = found->second;
        mapped().erase(found);
      }
    }
    if (bytes > 0) {
      munmap(data, bytes);
    } else {
      the().found_raw_free_.load()(data);
    }
  }
  // The blocks mapped and not yet freed, by address.
  static std::mutex& mapped_mutex() {
    static auto* mutex = new std::mutex();
    return *mutex;
  }
  static std::unordered_map<void*, size_t>& mapped() {
    static auto* blocks = new std::unordered_map<void*, size_t>();
    return *blocks;
  }

  std::mutex install_mutex_;
  std::atomic<c10::Allocator*> found_{nullptr};
  std::atomic<c10::DeleterFnPtr> found_raw_free_{nullptr};
  std::atomic<int> scopes_{0};  // the MappedAllocations alive, on any thread
};

}  // namespace

c10::Allocator* mapping_allocator() { return &MappingAllocator::the(); }

MappedAllocations::MappedAllocations() : active_(MappingAllocator::the().install()) {
  if (active_) MappingAllocator::the().enter();
}

MappedAllocations::~MappedAllocations() {
  if (active_) MappingAllocator::the().leave();
}

}  // namespace ddp::parallel::detail

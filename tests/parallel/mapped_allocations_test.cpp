// c10's CPU allocator while a ShardedConstruction is alive (Note [A
// construction's blocks outside the heap] in
// src/parallel/fully_sharded/mapped_allocations.hpp): large blocks are
// mappings of their own inside a scope and malloc's outside it, small ones
// malloc's always, and a block LibTorch's kernels allocate and free raw is
// freed by whichever allocator is installed when it is freed. Each test
// runs in a process of its own (gtest_discover_tests), so the first scope
// of each is the one that installs the allocator.

#include <c10/core/CPUAllocator.h>
#include <gtest/gtest.h>
#include <malloc.h>
#include <torch/torch.h>

#include <cstdint>
#include <thread>

#include "ddp/base/allocator.hpp"
#include "ddp/comm/init.hpp"
#include "ddp/parallel/fully_sharded_data_parallel.hpp"
#include "ddp/parallel/sharded_construction.hpp"
#include "parallel/fully_sharded/mapped_allocations.hpp"

namespace ddp::testing {
namespace {

using parallel::detail::MappedAllocations;

constexpr int64_t kMiB = 1 << 20;

// The bytes glibc's malloc has given out and not had back (its heaps'
// and its own mappings').
int64_t malloc_bytes() {
  const struct mallinfo2 info = mallinfo2();
  return static_cast<int64_t>(info.uordblks + info.hblkhd);
}

// How much malloc's count grew while `make` made a tensor, kept alive.
template <typename Make>
int64_t malloc_growth(Make&& make, torch::Tensor& made) {
  const int64_t before = malloc_bytes();
  made = make();
  return malloc_bytes() - before;
}

bool under_glibc() { return allocator_in_use().kind == AllocatorKind::kGlibc; }

TEST(FsdpMappedAllocations, LargeBlocksAreMappedInsideAScopeAndMallocsOutside) {
  if (!under_glibc()) GTEST_SKIP() << "counts glibc's malloc; " << allocator_in_use().summary();
  const auto large = [] { return torch::ones({4 * kMiB / 4}); };  // 4 MiB of float
  const auto small = [] { return torch::ones({64 * 1024 / 4}); };
  torch::Tensor before_scope, inside, inside_small, after_scope;
  const int64_t outside_growth = malloc_growth(large, before_scope);
  int64_t inside_growth = 0, small_growth = 0;
  {
    MappedAllocations scope;
    ASSERT_TRUE(scope.active());
    EXPECT_EQ(c10::GetCPUAllocator(), parallel::detail::mapping_allocator());
    inside_growth = malloc_growth(large, inside);
    small_growth = malloc_growth(small, inside_small);
  }
  const int64_t after_growth = malloc_growth(large, after_scope);
  EXPECT_GE(outside_growth, 4 * kMiB) << "before any scope, malloc's";
  EXPECT_LT(inside_growth, 64 * 1024) << "inside a scope, a mapping of its own";
  EXPECT_EQ(reinterpret_cast<uintptr_t>(inside.data_ptr()) % 4096, 0u);
  EXPECT_GE(small_growth, 64 * 1024) << "a small block is malloc's inside a scope too";
  EXPECT_GE(after_growth, 4 * kMiB) << "after the scope, malloc's again";
  // The mapped block holds and computes as any other.
  EXPECT_TRUE(torch::equal(inside, before_scope));
  EXPECT_EQ((inside + after_scope).sum().item<double>(), 2.0 * kMiB);
}

TEST(FsdpMappedAllocations, RawFreesWorkAcrossTheInstallAndTheScope) {
  // LibTorch's kernels allocate scratch with raw_allocate() and free it
  // with raw_deallocate() of the allocator installed at that time.
  c10::Allocator* found = c10::GetCPUAllocator();
  void* before_install = found->raw_allocate(4 * kMiB);
  void* small_before = found->raw_allocate(256);
  void* mapped = nullptr;
  void* small_inside = nullptr;
  {
    MappedAllocations scope;
    ASSERT_TRUE(scope.active());
    c10::Allocator* installed = c10::GetCPUAllocator();
    ASSERT_NE(installed, found);
    mapped = installed->raw_allocate(4 * kMiB);
    small_inside = installed->raw_allocate(256);
    static_cast<char*>(mapped)[4 * kMiB - 1] = 1;
    installed->raw_deallocate(before_install);  // malloc's, freed through the mapping allocator
  }
  c10::GetCPUAllocator()->raw_deallocate(mapped);  // mapped, freed after the scope
  c10::GetCPUAllocator()->raw_deallocate(small_inside);
  c10::GetCPUAllocator()->raw_deallocate(small_before);
  // A kernel that frees its scratch raw, inside a scope and outside.
  const torch::Tensor x = torch::linspace(-3, 3, 1 << 20, torch::requires_grad());
  const torch::Tensor expected = torch::autograd::grad({torch::gelu(x).sum()}, {x})[0];
  MappedAllocations scope;
  const torch::Tensor inside = torch::autograd::grad({torch::gelu(x).sum()}, {x})[0];
  EXPECT_TRUE(torch::equal(inside, expected));
}

TEST(FsdpMappedAllocations, ScopesNestAndCountAcrossThreads) {
  if (!under_glibc()) GTEST_SKIP() << "counts glibc's malloc; " << allocator_in_use().summary();
  const auto large = [] { return torch::empty({2 * kMiB / 4}); };
  torch::Tensor a, b, c;
  auto outer = std::make_unique<MappedAllocations>();
  std::thread other([] { MappedAllocations on_another_thread; });
  other.join();  // its scope ended: the outer one still maps
  EXPECT_LT(malloc_growth(large, a), 64 * 1024);
  { MappedAllocations inner; }
  EXPECT_LT(malloc_growth(large, b), 64 * 1024) << "an inner scope's end leaves the outer";
  outer.reset();
  EXPECT_GE(malloc_growth(large, c), 2 * kMiB);
}

TEST(FsdpMappedAllocations, ShardedConstructionMapsWhileAlive) {
  if (!under_glibc()) GTEST_SKIP() << "counts glibc's malloc; " << allocator_in_use().summary();
  const auto large = [] { return torch::empty({2 * kMiB / 4}); };
  torch::Tensor inside, after;
  const auto group = init(InitOptions().backend("gloo").rank(0).world_size(1));
  int64_t inside_growth = 0;
  {
    ShardedConstruction construction(group);
    inside_growth = malloc_growth(large, inside);
  }
  EXPECT_LT(inside_growth, 64 * 1024);
  EXPECT_GE(malloc_growth(large, after), 2 * kMiB);
}

// Last: it leaves a program's allocator installed at a higher priority.
TEST(FsdpMappedAllocations, AProgramsOwnAllocatorOfHigherPriorityStays) {
  c10::Allocator* found = c10::GetCPUAllocator();
  c10::SetCPUAllocator(found, /*priority=*/1);  // as a program installing its own
  MappedAllocations scope;
  EXPECT_FALSE(scope.active());
  EXPECT_EQ(c10::GetCPUAllocator(), found);
  EXPECT_TRUE(torch::equal(torch::ones({kMiB}) * 2, torch::full({kMiB}, 2.0)));
}

}  // namespace
}  // namespace ddp::testing

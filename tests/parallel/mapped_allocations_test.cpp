// c10's CPU allocator while a ShardedConstruction is alive (Note [A
// construction's blocks outside the heap] in
// src/parallel/fully_sharded/mapped_allocations.hpp): large blocks are
// mappings of their own inside a scope and malloc's outside it, small ones
// malloc's always, and a block LibTorch's kernels allocate and free raw is
// freed by whichever allocator is installed when it is freed. Each test
// runs in a process of its own (gtest_discover_tests), so the first scope
// of each is the one that installs the allocator. Through an FSDP backward
// the large blocks come from a pool instead (Note [The backward's large
// blocks from a pool]).

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
using parallel::detail::PooledAllocations;

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

// Note [The backward's large blocks from a pool].
TEST(FsdpMappedAllocations, APoolKeepsFreedBlocksWithinItsLimitForRequestsTheyHold) {
  if (!under_glibc()) GTEST_SKIP() << "counts glibc's malloc; " << allocator_in_use().summary();
  const auto floats = [](int64_t bytes) { return torch::empty({bytes / 4}); };
  torch::Tensor kept_again, outside;
  {
    PooledAllocations scope(6 * kMiB);
    ASSERT_TRUE(scope.active());
    torch::Tensor four = floats(4 * kMiB);
    const void* four_at = four.data_ptr();
    torch::Tensor two = floats(2 * kMiB);
    const void* two_at = two.data_ptr();
    four = torch::Tensor();
    two = torch::Tensor();
    EXPECT_EQ(parallel::detail::pooled_bytes(), size_t{6 * kMiB}) << "both kept: 6 MiB";
    torch::Tensor three = floats(3 * kMiB);
    EXPECT_EQ(three.data_ptr(), four_at) << "3 MiB from the kept 4 MiB block";
    const torch::Tensor one = floats(kMiB);
    EXPECT_EQ(one.data_ptr(), two_at) << "1 MiB from the kept 2 MiB block, twice its size";
    EXPECT_EQ(parallel::detail::pooled_bytes(), 0u);
    const torch::Tensor half = floats(kMiB / 2);  // below 1 MiB: malloc's
    EXPECT_NE(half.data_ptr(), four_at);
    torch::Tensor big = floats(8 * kMiB);  // held by nothing kept: mapped afresh
    big.fill_(1);
    three = torch::Tensor();
    big = torch::Tensor();  // 4 + 8 MiB beyond the 6 MiB limit: unmapped
    EXPECT_EQ(parallel::detail::pooled_bytes(), size_t{4 * kMiB});
    kept_again = floats(4 * kMiB);
    EXPECT_EQ(kept_again.data_ptr(), four_at);
  }
  EXPECT_EQ(parallel::detail::pooled_bytes(), size_t{2 * kMiB}) << "`one`'s, freed with the scope";
  kept_again = torch::Tensor();  // freed after the scope: kept too, within the limit
  EXPECT_EQ(parallel::detail::pooled_bytes(), size_t{6 * kMiB});
  {
    PooledAllocations again(6 * kMiB);
    torch::Tensor five = floats(5 * kMiB);  // no kept block holds it: mapped afresh
    five = torch::Tensor();                 // the smaller kept blocks make room for it
    EXPECT_EQ(parallel::detail::pooled_bytes(), size_t{5 * kMiB});
    torch::Tensor seven = floats(7 * kMiB);
    seven = torch::Tensor();  // beyond the limit: unmapped, the 5 MiB block kept
    EXPECT_EQ(parallel::detail::pooled_bytes(), size_t{5 * kMiB});
  }
  EXPECT_GE(malloc_growth([&] { return floats(4 * kMiB); }, outside), 4 * kMiB)
      << "outside a scope, malloc's";
  parallel::detail::release_pooled_blocks();
  EXPECT_EQ(parallel::detail::pooled_bytes(), 0u);
}

// A FullyShardedDataParallel's backward keeps LibTorch's gradients' blocks
// (its parameters' largest, 4 MiB), empty_cache() frees them, and
// cache_buffers(false) keeps none.
TEST(FsdpMappedAllocations, AnFsdpBackwardKeepsItsGradientsBlocks) {
  const auto group = init(InitOptions().backend("gloo").rank(0).world_size(1));
  auto step = [&](FullyShardedDataParallelOptions options) {
    torch::manual_seed(1);
    FullyShardedDataParallel model(
        torch::nn::Sequential(torch::nn::Linear(1024, 1024), torch::nn::Linear(1024, 512)), options,
        group);
    for (int i = 0; i < 2; ++i) model->forward(torch::randn({2, 1024})).sum().backward();
    return model;
  };
  FullyShardedDataParallel kept = step(FullyShardedDataParallelOptions());
  EXPECT_EQ(kept->memory().pooled_bytes, 4 * kMiB) << "the 4 MiB weight's gradient block";
  kept->empty_cache();
  EXPECT_EQ(kept->memory().pooled_bytes, 0);
  FullyShardedDataParallel off = step(FullyShardedDataParallelOptions().cache_buffers(false));
  EXPECT_EQ(off->memory().pooled_bytes, 0);
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

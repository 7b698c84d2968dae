#pragma once

// Internal: while a ShardedConstruction is alive, c10's CPU allocator maps
// each large block by itself (Note [A construction's blocks outside the
// heap]), and through an FSDP backward serves them from mappings it keeps
// (Note [The backward's large blocks from a pool]).

#include <c10/core/Allocator.h>

namespace ddp::parallel::detail {

// Note [A construction's blocks outside the heap]
// Building a unit allocates its parameters whole where LibTorch's modules
// put them (c10's CPU allocator, malloc); ddp copies out this rank's shard
// and frees them. Under glibc those blocks come from the heap once its
// mmap threshold has risen, and although malloc_trim gives their pages
// back (Note [Freed memory given back]), the heap's span stays as wide as
// the model was, and the step's transients later spread over all of it:
// the transformer of benchmarks/fsdp_transformer_bench.cpp (202 M
// parameters, 4 ranks) left a 600 MB heap with 552 MB free. So while a
// MappedAllocations is alive (a ShardedConstruction holds one) c10's CPU
// allocator maps each block from kMappedMinBytes by itself (Note
// [Long-lived buffers outside the heap]) and unmaps it when freed. The
// allocator is installed over c10's once, at c10's default priority (an
// allocator a program installed with a higher one keeps its place, and
// nothing is mapped), and stays: outside every scope it hands each request
// to the allocator it found. Not swapped back, because LibTorch's kernels
// free their scratch through whichever allocator is installed when they
// free it (Allocator::raw_deallocate), so a block must be freeable by the
// installed allocator whenever it was allocated; this one's deleter frees
// both kinds.
class MappedAllocations {
 public:
  /// Maps large host blocks from now on, until destroyed (scopes nest and
  /// count across threads).
  MappedAllocations();
  ~MappedAllocations();
  MappedAllocations(const MappedAllocations&) = delete;
  MappedAllocations& operator=(const MappedAllocations&) = delete;

  /// Whether large blocks are mapped in this scope (false where a
  /// program's own allocator outranks c10's default).
  bool active() const { return active_; }

 private:
  bool active_ = false;
};

// Note [The backward's large blocks from a pool]
// LibTorch computes each parameter's gradient into a fresh block, which
// FSDP adds into its unit's full gradient and frees (Note [The order of a
// sharded step]). Under glibc those blocks, up to the largest parameter,
// come from the heap once its mmap threshold has risen, between the
// backward's small transients, and the heap's free space around them is
// resident at the peak (37-77 MB on benchmarks/fsdp_transformer_bench.cpp
// at width 1024); mapping each one by itself instead faults all of the
// gradients in again every step (25% slower backward there). So while a
// PooledAllocations is alive (a FullyShardedDataParallel holds one through
// each backward, asking to keep its largest parameter's bytes) c10's CPU
// allocator serves each block from kMappedMinBytes from mappings it keeps:
// a freed one is kept while the kept ones stay within the largest
// `keep_bytes` any scope asked for (smaller kept blocks make room for a
// larger one), and a later request takes the smallest kept block that
// holds it and is at most twice its size. So the pool
// holds at most twice the largest parameter at once, the gradient in use
// and the blocks kept. CUDA's caching allocator does the same for GPU
// memory. The kept blocks stay between steps, their pages resident, until
// release_pooled_blocks() (FullyShardedDataParallel::empty_cache()).
class PooledAllocations {
 public:
  /// Serves large host blocks from kept mappings from now on, until
  /// destroyed, keeping at most `keep_bytes` of freed ones (the largest any
  /// scope gave).
  explicit PooledAllocations(size_t keep_bytes);
  ~PooledAllocations();
  PooledAllocations(const PooledAllocations&) = delete;
  PooledAllocations& operator=(const PooledAllocations&) = delete;

  /// Whether large blocks come from the pool in this scope (false where a
  /// program's own allocator outranks c10's default).
  bool active() const { return active_; }

 private:
  bool active_ = false;
};

/// Unmaps every block the pool keeps (Note [The backward's large blocks
/// from a pool]); the next scope keeps from scratch.
void release_pooled_blocks();
/// The bytes the pool keeps, freed and not taken again.
size_t pooled_bytes();

/// ddp's CPU allocator, c10's once a MappedAllocations or PooledAllocations
/// was made (for tests).
c10::Allocator* mapping_allocator();

}  // namespace ddp::parallel::detail

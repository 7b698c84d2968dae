#pragma once

// Internal: while a ShardedConstruction is alive, c10's CPU allocator maps
// each large block by itself (Note [A construction's blocks outside the
// heap]).

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

/// ddp's CPU allocator, c10's once a MappedAllocations was made (for tests).
c10::Allocator* mapping_allocator();

}  // namespace ddp::parallel::detail

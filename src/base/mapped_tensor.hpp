#pragma once

// Internal: host tensors whose bytes are a mapping of their own, outside
// malloc's heap (Note [Long-lived buffers outside the heap]).

#include <ATen/ATen.h>
#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <new>

namespace ddp::base::detail {

// Note [Long-lived buffers outside the heap]
// glibc's malloc serves every block below its mmap threshold from its
// heap, and the threshold follows the largest block freed (up to 32 MiB),
// so after a step's first large gradient is freed the heap holds nearly
// everything: a step's transients (activations, the gradients LibTorch
// computes before they are added into a unit's buffer) and, between them,
// the blocks that live for the whole job. A long-lived block allocated
// while transients are live pins the free space around it, and the heap
// gives pages back only from its top, so that space stays resident: FSDP's
// step on the transformer of benchmarks/fsdp_transformer_bench.cpp (width
// 1024, 16 blocks, 4 ranks) peaked at 1,520 MB, its bound 1,217, with 860
// MB of the heap in use between steps (AdamW's moments, the shards, their
// gradients) and 534 MB free beside them. So the host buffers that live for
// the job are each a mapping of their own: FSDP's shards, their gradients,
// the buffers of Note [Buffers kept between steps], and ddp's optimizers'
// states (LibTorch's own optimizers allocate theirs from the heap). Their
// pages are touched once and stay; the heap is left to the transients,
// which a step frees and the next reuses (1,338 MB there, 49 MB of the heap
// in use between steps). Pinning glibc's threshold instead maps every
// transient too and disables the dynamic trim threshold, so each step
// unmaps and faults again: 35% slower there. Below kMappedMinBytes a
// tensor comes from malloc: small blocks fragment little, and a mapping
// each would spend the process's mappings (vm.max_map_count, 65530 by
// default).
inline constexpr size_t kMappedMinBytes = size_t{1} << 20;

// The deleter's context: what munmap needs.
struct Mapping {
  void* data = nullptr;
  size_t bytes = 0;
};

inline void unmap(void* context) {
  auto* mapping = static_cast<Mapping*>(context);
  munmap(mapping->data, mapping->bytes);
  delete mapping;
}

/// `bytes` of anonymous memory, zero and not resident until touched;
/// std::bad_alloc where the system cannot map them.
inline void* map_pages(size_t bytes) {
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (data == MAP_FAILED) throw std::bad_alloc();
  return data;
}

/// A contiguous uninitialized tensor of `numel` elements of `options`; on
/// the host and from kMappedMinBytes, its bytes are a mapping of its own,
/// zero until written (Note [Long-lived buffers outside the heap]), or
/// malloc's where the system refuses another mapping (vm.max_map_count).
inline at::Tensor mapped_empty(int64_t numel, const at::TensorOptions& options) {
  const size_t bytes = static_cast<size_t>(numel) * options.dtype().itemsize();
  void* data =
      options.device().type() == c10::DeviceType::CPU && bytes >= kMappedMinBytes
          ? mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0)
          : MAP_FAILED;
  if (data == MAP_FAILED) return at::empty({numel}, options);
  at::DataPtr pointer;
  try {
    pointer = at::DataPtr(data, new Mapping{data, bytes}, &unmap, options.device());
  } catch (...) {
    munmap(data, bytes);
    throw;
  }
  c10::Storage storage(c10::Storage::use_byte_size_t(), bytes, std::move(pointer),
                       /*allocator=*/nullptr, /*resizable=*/false);
  return at::empty({0}, options.requires_grad(false)).set_(storage, 0, {numel}, {1});
}

/// Zeros laid out as `like` (a contiguous host tensor's are a mapping of
/// their own from kMappedMinBytes, whose pages stay untouched until
/// written); otherwise zeros_like() preserving its layout.
inline at::Tensor mapped_zeros_like(const at::Tensor& like) {
  const size_t bytes = static_cast<size_t>(like.numel()) * like.element_size();
  if (like.device().type() != c10::DeviceType::CPU || !like.is_contiguous() ||
      bytes < kMappedMinBytes) {
    return at::zeros_like(like, at::MemoryFormat::Preserve);
  }
  return mapped_empty(like.numel(), like.options().requires_grad(false)).view(like.sizes());
}

/// mapped_empty() holding `source`'s values, flattened; not part of any graph.
inline at::Tensor mapped_copy(const at::Tensor& source) {
  return mapped_empty(source.numel(), source.options().requires_grad(false))
      .copy_(source.detach().reshape({-1}));
}

}  // namespace ddp::base::detail

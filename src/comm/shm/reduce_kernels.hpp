#pragma once

// Internal: element-wise reductions over raw buffers, for the shared-memory
// backend. Compiled on their own with -O3 and without LibTorch's headers, so
// that the loops vectorize and the file builds in seconds.

#include <cstddef>
#include <cstdint>

namespace ddp::comm::shm {

/// Element types the kernels handle (the dtypes ddp's collectives carry).
enum class ElementType { kFloat32, kFloat64, kBFloat16, kFloat16, kInt32, kInt64 };

/// How values combine.
enum class Combine { kSum, kMin, kMax, kProduct };

/// Bytes per element of `type`.
int element_size(ElementType type) noexcept;

/// Copies `bytes` from `src` to `dst` (no overlap) in 64-byte vector moves;
/// what the backend uses instead of std::memcpy for data another rank wrote
/// or will read (Note [Copies between ranks avoid rep movsb]).
void copy_bytes(void* dst, const void* src, size_t bytes) noexcept;

/// dst[i] = combine(sources[0][i], ..., sources[count - 1][i]) for i < n, in
/// source order; then, if divisor > 1, dst[i] /= divisor (integers truncate).
/// 16-bit floats are combined and divided in float32 and rounded once. When
/// `copy` is not null the result is also stored there (one pass instead of a
/// second read); `copy` may be one of the sources at the same offsets (each
/// block is read before it is written). `dst` may not overlap a source.
void reduce(ElementType type, Combine combine, void* dst, void* copy, const void* const* sources,
            int count, int64_t n, int divisor);

}  // namespace ddp::comm::shm

#include "comm/shm/reduce_kernels.hpp"

#include <c10/util/Half.h>

#include <algorithm>
#include <cstring>

namespace ddp::comm::shm {
namespace {

// Note [Blocked reduction]
// Each block of kBlock elements is accumulated in a small array that stays
// in L1 while every source is folded into it, so memory sees each source
// once and the destination once, whatever the number of ranks. The inner
// loops are plain and branch-free, which GCC vectorizes at -O3 for every
// element type; 16-bit floats are widened into a float32 accumulator.
constexpr int64_t kBlock = 2048;

struct Bf16 {
  static float load(uint16_t bits) {
    const uint32_t wide = static_cast<uint32_t>(bits) << 16;
    float value;
    std::memcpy(&value, &wide, sizeof(value));
    return value;
  }
  // Round to nearest even; NaN stays a quiet NaN.
  static uint16_t store(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    const uint32_t rounded = (bits + 0x7FFFu + ((bits >> 16) & 1u)) >> 16;
    return value != value ? uint16_t{0x7FC0} : static_cast<uint16_t>(rounded);
  }
};

struct F16 {
  static float load(uint16_t bits) { return c10::detail::fp16_ieee_to_fp32_value(bits); }
  static uint16_t store(float value) { return c10::detail::fp16_ieee_from_fp32_value(value); }
};

template <typename T>
struct Same {
  static T load(T value) { return value; }
  static T store(T value) { return value; }
};

template <Combine C, typename A>
inline A combine(A a, A b) {
  if constexpr (C == Combine::kSum) return a + b;
  if constexpr (C == Combine::kProduct) return a * b;
  if constexpr (C == Combine::kMin) return b < a ? b : a;
  if constexpr (C == Combine::kMax) return b > a ? b : a;
}

// Stored type T, accumulator type A, conversions Io.
template <typename T, typename A, typename Io, Combine C>
void reduce_typed(void* dst_raw, void* copy_raw, const void* const* sources, int count, int64_t n,
                  int divisor) {
  T* dst = static_cast<T*>(dst_raw);
  T* copy = static_cast<T*>(copy_raw);
  A acc[kBlock];
  for (int64_t begin = 0; begin < n; begin += kBlock) {
    const int64_t len = std::min(kBlock, n - begin);
    const T* __restrict first = static_cast<const T*>(sources[0]) + begin;
    for (int64_t i = 0; i < len; ++i) acc[i] = Io::load(first[i]);
    for (int s = 1; s < count; ++s) {
      const T* __restrict src = static_cast<const T*>(sources[s]) + begin;
      for (int64_t i = 0; i < len; ++i) acc[i] = combine<C, A>(acc[i], Io::load(src[i]));
    }
    if (divisor > 1) {
      const A d = static_cast<A>(divisor);
      for (int64_t i = 0; i < len; ++i) acc[i] = acc[i] / d;
    }
    T* __restrict out = dst + begin;
    for (int64_t i = 0; i < len; ++i) out[i] = Io::store(acc[i]);
    if (copy) copy_bytes(copy + begin, out, len * sizeof(T));
  }
}

template <typename T, typename A, typename Io>
void reduce_with(Combine combine_kind, void* dst, void* copy, const void* const* sources, int count,
                 int64_t n, int divisor) {
  switch (combine_kind) {
    case Combine::kSum:
      return reduce_typed<T, A, Io, Combine::kSum>(dst, copy, sources, count, n, divisor);
    case Combine::kMin:
      return reduce_typed<T, A, Io, Combine::kMin>(dst, copy, sources, count, n, divisor);
    case Combine::kMax:
      return reduce_typed<T, A, Io, Combine::kMax>(dst, copy, sources, count, n, divisor);
    case Combine::kProduct:
      return reduce_typed<T, A, Io, Combine::kProduct>(dst, copy, sources, count, n, divisor);
  }
}

}  // namespace

// Note [Copies between ranks avoid rep movsb]
// glibc's memcpy copies blocks from a few KiB up to the L2 size (512 KiB on
// AMD Zen 3) with `rep movsb`. For lines that sit in another core's cache,
// which is what the backend's copies read (a peer's slot) and produce (a
// slot a peer reads next), that is 2-4x slower on this 2-core EPYC than
// plain vector moves; above 512 KiB glibc switches to a vector loop. So a
// 512 KiB all-reduce took twice as long as a 1 MiB one: in a two-process
// replica of the backend's all-reduce (median of 3000 calls) 56, 108 and
// 55 us at 256 KiB, 512 KiB and 1 MiB with memcpy, 31, 59 and 116 us with
// the 64-byte moves below, which the compiler inlines. The empty asm keeps
// the compiler from recognising the loop and calling memcpy after all.
void copy_bytes(void* dst, const void* src, size_t bytes) noexcept {
  auto* to = static_cast<unsigned char*>(dst);
  const auto* from = static_cast<const unsigned char*>(src);
  size_t done = 0;
  for (; done + 64 <= bytes; done += 64) {
    __builtin_memcpy(to + done, from + done, 64);
    asm volatile("" ::: "memory");
  }
  if (done < bytes) std::memcpy(to + done, from + done, bytes - done);  // Under 64 bytes.
}

int element_size(ElementType type) noexcept {
  switch (type) {
    case ElementType::kFloat64:
    case ElementType::kInt64:
      return 8;
    case ElementType::kFloat32:
    case ElementType::kInt32:
      return 4;
    case ElementType::kBFloat16:
    case ElementType::kFloat16:
      return 2;
  }
  return 1;
}

void reduce(ElementType type, Combine combine_kind, void* dst, void* copy,
            const void* const* sources, int count, int64_t n, int divisor) {
  switch (type) {
    case ElementType::kFloat32:
      return reduce_with<float, float, Same<float>>(combine_kind, dst, copy, sources, count, n,
                                                    divisor);
    case ElementType::kFloat64:
      return reduce_with<double, double, Same<double>>(combine_kind, dst, copy, sources, count, n,
                                                       divisor);
    case ElementType::kInt32:
      return reduce_with<int32_t, int32_t, Same<int32_t>>(combine_kind, dst, copy, sources, count,
                                                          n, divisor);
    case ElementType::kInt64:
      return reduce_with<int64_t, int64_t, Same<int64_t>>(combine_kind, dst, copy, sources, count,
                                                          n, divisor);
    case ElementType::kBFloat16:
      return reduce_with<uint16_t, float, Bf16>(combine_kind, dst, copy, sources, count, n,
                                                divisor);
    case ElementType::kFloat16:
      return reduce_with<uint16_t, float, F16>(combine_kind, dst, copy, sources, count, n, divisor);
  }
}

}  // namespace ddp::comm::shm

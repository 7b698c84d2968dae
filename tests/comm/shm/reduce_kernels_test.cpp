// The shared-memory backend's reduction kernels (one process): every element
// type x every combine x lengths that leave vector and block tails x 1 to 4
// sources x divisor 1 and 3 x `copy` absent, distinct or aliasing a source,
// against ATen on the same data.
//
// Note [Exact comparisons]
// Every comparison is exact (at::equal). Sums and products use values whose
// float32 results are exact in any order (quarter-integers up to 8 for sums,
// integers up to 4 for products: at most 4 x 32 quarters, or 4^4 = 256), so
// the kernel's source order and ATen's reduction order agree bit for bit;
// min and max select a value, so any values do. A division is one IEEE
// operation in the accumulator type on both sides (ATen divides by a tensor
// of the divisor, elementwise). 16-bit floats: the kernel widens to float32,
// combines and divides there, and rounds once (nearest even), so the
// reference does the same in float32 and casts once. Integers truncate
// toward zero, ATen's rounding_mode "trunc". NaN is left out: the kernel's
// min/max do not propagate it as amin/amax do, and no collective relies on it.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <vector>

#include "comm/shm/reduce_kernels.hpp"

namespace ddp::comm::shm {
namespace {

const std::vector<ElementType> kTypes = {ElementType::kFloat32,  ElementType::kFloat64,
                                         ElementType::kBFloat16, ElementType::kFloat16,
                                         ElementType::kInt32,    ElementType::kInt64};
// Vector tails (1, 7, 33, 1023) and more than one 2048-element block (4097).
const std::vector<int64_t> kLengths = {1, 7, 33, 1023, 4097};
const std::vector<int> kDivisors = {1, 3};
constexpr int64_t kGuard = 8;  // elements after n that must stay untouched

enum class CopyMode { kNone, kDistinct, kAliasFirst, kAliasLast };
const std::vector<CopyMode> kCopyModes = {CopyMode::kNone, CopyMode::kDistinct,
                                          CopyMode::kAliasFirst, CopyMode::kAliasLast};

at::ScalarType scalar_type_of(ElementType type) {
  switch (type) {
    case ElementType::kFloat32:
      return at::kFloat;
    case ElementType::kFloat64:
      return at::kDouble;
    case ElementType::kBFloat16:
      return at::kBFloat16;
    case ElementType::kFloat16:
      return at::kHalf;
    case ElementType::kInt32:
      return at::kInt;
    case ElementType::kInt64:
      return at::kLong;
  }
  return at::kFloat;
}

bool is_integral(ElementType type) {
  return type == ElementType::kInt32 || type == ElementType::kInt64;
}

// One source's values (see Note [Exact comparisons]).
at::Tensor values_for(ElementType type, Combine combine, int64_t n) {
  const at::ScalarType dtype = scalar_type_of(type);
  const bool int64 = type == ElementType::kInt64;
  if (is_integral(type)) {
    switch (combine) {
      case Combine::kSum:  // |sum of 4| < 2^30 (int32), < 2^62 (int64)
        return at::randint(int64 ? -(int64_t{1} << 60) : -(1 << 28),
                           int64 ? (int64_t{1} << 60) : (1 << 28), {n}, at::kLong)
            .to(dtype);
      case Combine::kProduct:  // 40^4 < 2^31; 3000^4 > 2^32 needs 64 bits
        return at::randint(int64 ? -3000 : -40, int64 ? 3001 : 41, {n}, at::kLong).to(dtype);
      case Combine::kMin:
      case Combine::kMax:
        return at::randint(int64 ? -(int64_t{1} << 62) : -2147483647LL,
                           int64 ? (int64_t{1} << 62) : 2147483647LL, {n}, at::kLong)
            .to(dtype);
    }
  }
  switch (combine) {
    case Combine::kSum:
      return (at::randint(-32, 33, {n}, at::kLong).to(at::kFloat) / 4).to(dtype);
    case Combine::kProduct:
      return at::randint(-4, 5, {n}, at::kLong).to(dtype);
    case Combine::kMin:
    case Combine::kMax:
      return (at::randn({n}, at::kDouble) * 100).to(dtype);
  }
  return {};
}

// ATen's answer: combined (and divided) in the kernel's accumulator type,
// then stored in the element type.
at::Tensor reference(ElementType type, Combine combine, const std::vector<at::Tensor>& sources,
                     int divisor) {
  const at::ScalarType dtype = scalar_type_of(type);
  const bool narrow = type == ElementType::kBFloat16 || type == ElementType::kFloat16;
  const at::ScalarType accumulator = narrow ? at::kFloat : dtype;
  const at::Tensor stacked = at::stack(sources).to(accumulator);
  at::Tensor result;
  switch (combine) {
    case Combine::kSum:
      result = stacked.sum(0).to(accumulator);
      break;  // ints sum in int64
    case Combine::kProduct:
      result = stacked.prod(0).to(accumulator);
      break;
    case Combine::kMin:
      result = stacked.amin(0);
      break;
    case Combine::kMax:
      result = stacked.amax(0);
      break;
  }
  if (divisor > 1) {
    const at::Tensor d = at::full_like(result, divisor);
    result = is_integral(type) ? at::div(result, d, "trunc") : result / d;
  }
  return result.to(dtype);
}

// A buffer of n + kGuard elements holding `fill`, and its first n.
at::Tensor guarded(ElementType type, int64_t n, double fill) {
  return at::full({n + kGuard}, fill, at::TensorOptions().dtype(scalar_type_of(type)));
}

std::string case_name(ElementType type, Combine combine, int64_t n, int count, int divisor,
                      CopyMode mode) {
  return std::string(c10::toString(scalar_type_of(type))) + " combine " +
         std::to_string(static_cast<int>(combine)) + " n=" + std::to_string(n) +
         " sources=" + std::to_string(count) + " divisor=" + std::to_string(divisor) +
         " copy mode " + std::to_string(static_cast<int>(mode));
}

void check_case(ElementType type, Combine combine, int64_t n, int count, int divisor,
                CopyMode mode) {
  SCOPED_TRACE(case_name(type, combine, n, count, divisor, mode));
  // Sources carry guard elements too, so that a kernel reading past n would
  // still not fault, while the guards of dst and copy show any write past n.
  std::vector<at::Tensor> buffers;
  std::vector<at::Tensor> sources;
  for (int s = 0; s < count; ++s) {
    buffers.push_back(at::cat({values_for(type, combine, n), guarded(type, 0, 5)}));
    sources.push_back(buffers.back().narrow(0, 0, n).clone());
  }
  const at::Tensor expected = reference(type, combine, sources, divisor);

  at::Tensor dst = guarded(type, n, 77);
  at::Tensor copy_buffer;
  switch (mode) {
    case CopyMode::kNone:
      break;
    case CopyMode::kDistinct:
      copy_buffer = guarded(type, n, 66);
      break;
    case CopyMode::kAliasFirst:
      copy_buffer = buffers.front();
      break;
    case CopyMode::kAliasLast:
      copy_buffer = buffers.back();
      break;
  }
  std::vector<const void*> pointers;
  for (const at::Tensor& b : buffers) pointers.push_back(b.data_ptr());
  reduce(type, combine, dst.data_ptr(), copy_buffer.defined() ? copy_buffer.data_ptr() : nullptr,
         pointers.data(), count, n, divisor);

  EXPECT_TRUE(at::equal(dst.narrow(0, 0, n), expected))
      << "first elements: " << dst.narrow(0, 0, std::min<int64_t>(n, 4)) << " expected "
      << expected.narrow(0, 0, std::min<int64_t>(n, 4));
  EXPECT_TRUE(at::equal(dst.narrow(0, n, kGuard), guarded(type, 0, 77))) << "dst written past n";
  if (copy_buffer.defined()) {
    EXPECT_TRUE(at::equal(copy_buffer.narrow(0, 0, n), expected));
    const double guard = mode == CopyMode::kDistinct ? 66 : 5;
    EXPECT_TRUE(at::equal(copy_buffer.narrow(0, n, kGuard), guarded(type, 0, guard)))
        << "copy written past n";
  }
  // Sources other than an aliased copy are unchanged.
  for (int s = 0; s < count; ++s) {
    if (buffers[s].is_same(copy_buffer)) continue;
    EXPECT_TRUE(at::equal(buffers[s].narrow(0, 0, n), sources[s])) << "source " << s << " changed";
  }
}

void check_combine(Combine combine) {
  at::manual_seed(20240613 + static_cast<int>(combine));
  for (ElementType type : kTypes) {
    for (int64_t n : kLengths) {
      for (int count = 1; count <= 4; ++count) {
        for (int divisor : kDivisors) {
          for (CopyMode mode : kCopyModes) check_case(type, combine, n, count, divisor, mode);
        }
      }
    }
  }
}

TEST(ShmReduceKernels, SumMatchesAten) { check_combine(Combine::kSum); }
TEST(ShmReduceKernels, MinMatchesAten) { check_combine(Combine::kMin); }
TEST(ShmReduceKernels, MaxMatchesAten) { check_combine(Combine::kMax); }
TEST(ShmReduceKernels, ProductMatchesAten) { check_combine(Combine::kProduct); }

TEST(ShmReduceKernels, ElementSize) {
  EXPECT_EQ(element_size(ElementType::kFloat32), 4);
  EXPECT_EQ(element_size(ElementType::kFloat64), 8);
  EXPECT_EQ(element_size(ElementType::kBFloat16), 2);
  EXPECT_EQ(element_size(ElementType::kFloat16), 2);
  EXPECT_EQ(element_size(ElementType::kInt32), 4);
  EXPECT_EQ(element_size(ElementType::kInt64), 8);
  for (ElementType type : kTypes) {
    EXPECT_EQ(element_size(type), static_cast<int>(c10::elementSize(scalar_type_of(type))));
  }
}

// Closed forms: the average of integers truncates toward zero (-7 / 2 is -3,
// not -4, and 7 / 2 is 3), in 32 and 64 bits.
TEST(ShmReduceKernels, IntegerAverageTruncatesTowardZero) {
  const std::vector<int32_t> a32 = {-3, 3, -9, 2000000000};
  const std::vector<int32_t> b32 = {-4, 4, 0, 100000000};
  std::vector<int32_t> out32(4);
  const void* sources32[] = {a32.data(), b32.data()};
  reduce(ElementType::kInt32, Combine::kSum, out32.data(), nullptr, sources32, 2, 4, 2);
  EXPECT_EQ(out32[0], -3);
  EXPECT_EQ(out32[1], 3);
  EXPECT_EQ(out32[2], -4);          // -9 / 2 = -4.5 -> -4
  EXPECT_EQ(out32[3], 1050000000);  // 2.1e9 fits in int32: summed without widening

  const std::vector<int64_t> a64 = {-7, 7, (int64_t{1} << 62) + 1};
  const std::vector<int64_t> b64 = {0, 0, (int64_t{1} << 62) - 2};
  const std::vector<int64_t> c64 = {0, 0, 0};
  std::vector<int64_t> out64(3);
  const void* sources64[] = {a64.data(), b64.data(), c64.data()};
  reduce(ElementType::kInt64, Combine::kSum, out64.data(), nullptr, sources64, 3, 3, 2);
  EXPECT_EQ(out64[0], -3);
  EXPECT_EQ(out64[1], 3);
  EXPECT_EQ(out64[2], (int64_t{1} << 62) - 1);  // (2^63 - 1) / 2, exact: no float detour
}

// Closed forms: 16-bit floats round once. 1 + 2^-8 + 2^-8 in bfloat16 (7
// stored mantissa bits) is 1 + 2^-7 when the sum is kept in float32; rounding
// after each addition would give 1 (each 1 + 2^-8 is a tie, rounded to even).
// Likewise 1 + 2^-11 + 2^-11 in float16 (10 bits) is 1 + 2^-10, not 1.
TEST(ShmReduceKernels, SixteenBitFloatsRoundOnce) {
  const auto check = [](at::ScalarType dtype, ElementType type, double half_ulp) {
    std::vector<at::Tensor> sources = {at::full({3}, 1.0, dtype), at::full({3}, half_ulp, dtype),
                                       at::full({3}, half_ulp, dtype)};
    at::Tensor dst = at::empty({3}, dtype);
    const void* pointers[] = {sources[0].data_ptr(), sources[1].data_ptr(), sources[2].data_ptr()};
    reduce(type, Combine::kSum, dst.data_ptr(), nullptr, pointers, 3, 3, 1);
    EXPECT_EQ(dst.to(at::kDouble)[0].item<double>(), 1.0 + 2 * half_ulp) << dtype;
    // Averaged: (1 + 2 half_ulp) / 3 rounded once from float32.
    reduce(type, Combine::kSum, dst.data_ptr(), nullptr, pointers, 3, 3, 3);
    const float once = static_cast<float>(1.0 + 2 * half_ulp) / 3.0f;
    EXPECT_EQ(dst.to(at::kDouble)[1].item<double>(),
              at::full({1}, once, at::kFloat).to(dtype).to(at::kDouble).item<double>())
        << dtype;
  };
  check(at::kBFloat16, ElementType::kBFloat16, 1.0 / 256);
  check(at::kHalf, ElementType::kFloat16, 1.0 / 2048);
}

// copy_bytes moves 64-byte blocks and then the tail: every length from 0 to
// 3 blocks and a bit, at every offset within a cache line of source and
// destination, copies exactly those bytes and touches nothing around them.
TEST(ShmReduceKernels, CopyBytesCopiesExactlyTheRange) {
  std::vector<unsigned char> source(512), target(512);
  for (size_t i = 0; i < source.size(); ++i) source[i] = static_cast<unsigned char>(i * 7 + 1);
  for (size_t from : {0, 1, 13, 63}) {
    for (size_t to : {0, 5, 32, 64}) {
      for (size_t bytes = 0; bytes <= 200; ++bytes) {
        std::fill(target.begin(), target.end(), 0xEE);
        copy_bytes(target.data() + to, source.data() + from, bytes);
        for (size_t i = 0; i < target.size(); ++i) {
          const bool inside = i >= to && i < to + bytes;
          const unsigned char expected = inside ? source[from + i - to] : 0xEE;
          ASSERT_EQ(target[i], expected) << "byte " << i << " of a copy of " << bytes
                                         << " bytes from offset " << from << " to " << to;
        }
      }
    }
  }
}

}  // namespace
}  // namespace ddp::comm::shm

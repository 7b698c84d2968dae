#include "optim/adam_kernel.hpp"

#include <ATen/Parallel.h>

#include <cmath>
#include <type_traits>

// Note [Same rounding as LibTorch's Adam]
// LibTorch's Adam and AdamW make a pass over memory per operation (mul_,
// add_, addcmul_, sqrt, div, add_, addcdiv_), each rounding its result to
// the parameter's dtype. This pass makes the same operations on each
// element held in a register, in the same order, each rounded to T as
// ATen's kernels round it, so that the values agree bit for bit:
//   - add_(other, alpha) is ATen's fused multiply-add, fma(other, alpha, self)
//     (the "add" ufunc's vectorized loop, and its scalar tail, which GCC
//     contracts to the same instruction);
//   - addcmul_(t1, t2, value) is fma(value * t1, t2, self): ATen writes
//     self + value * t1 * t2, and GCC, which Debian builds it with, fuses
//     the last multiply and the add (measured against LibTorch 1.13 and
//     2.6: every element agrees with this and only this);
//   - addcdiv_(t1, t2, value) is self + (value * t1) / t2, three roundings,
//     nothing to fuse;
//   - the division by sqrt(bias_correction2) is a true division, not a
//     multiplication by its reciprocal.
// The file is compiled with -ffp-contract=off (src/optim/sources.cmake), so
// that the compiler fuses nothing that ATen does not: each std::fma below
// is one of ATen's, and nothing else is. (-fno-math-errno lets std::sqrt
// be the vector instruction; its values are IEEE's either way.)

namespace ddp::optim::detail {
namespace {

/// The largest of a and b, NaN when either is (torch::max's rule).
template <typename T>
inline T maximum(T a, T b) {
  return (a != a || b != b) ? a + b : (a > b ? a : b);
}

/// How the weight decay enters: not at all, AdamW's decay of the parameter,
/// or Adam's L2 term in the gradient.
enum class Decay { kNone, kDecoupled, kL2 };

/// One variant of the loop per decay and amsgrad, so that the loop has no
/// branch and vectorizes; the scalars are copied to locals, which no store
/// through the arrays can alias.
template <typename T, Decay kDecay, bool kAmsgrad>
__attribute__((always_inline)) inline void update_range(
    const AdamScalars<T>& scalars, T* __restrict param, const T* __restrict grad,
    T* __restrict exp_avg, T* __restrict exp_avg_sq, T* __restrict max_exp_avg_sq, int64_t n) {
  const AdamScalars<T> s = scalars;
  for (int64_t i = 0; i < n; ++i) {
    T p = param[i];
    T g = grad[i];
    if constexpr (kDecay == Decay::kDecoupled) p = p * s.decay;  // p.mul_(1 - lr * weight_decay)
    if constexpr (kDecay == Decay::kL2) g = std::fma(p, s.weight_decay, g);  // grad.add(p, wd)
    const T m = std::fma(g, s.one_minus_beta1, exp_avg[i] * s.beta1);
    const T v = std::fma(s.one_minus_beta2 * g, g, exp_avg_sq[i] * s.beta2);
    exp_avg[i] = m;
    exp_avg_sq[i] = v;
    T second = v;
    if constexpr (kAmsgrad) {
      second = maximum(v, max_exp_avg_sq[i]);
      max_exp_avg_sq[i] = second;
    }
    const T denom = std::sqrt(second) / s.bias_correction2_sqrt + s.eps;
    param[i] = p + (s.negative_step_size * m) / denom;
  }
}

/// update_range with the variant `s` asks for.
template <typename T>
__attribute__((always_inline)) inline void update_any(const AdamScalars<T>& s, T* param,
                                                      const T* grad, T* exp_avg, T* exp_avg_sq,
                                                      T* max_exp_avg_sq, int64_t n) {
  const Decay decay = !s.has_weight_decay ? Decay::kNone
                      : s.decoupled_decay ? Decay::kDecoupled
                                          : Decay::kL2;
  auto run = [&](auto decay_constant) {
    constexpr Decay kDecay = decltype(decay_constant)::value;
    if (s.amsgrad)
      update_range<T, kDecay, true>(s, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, n);
    else
      update_range<T, kDecay, false>(s, param, grad, exp_avg, exp_avg_sq, nullptr, n);
  };
  switch (decay) {
    case Decay::kNone:
      run(std::integral_constant<Decay, Decay::kNone>{});
      break;
    case Decay::kDecoupled:
      run(std::integral_constant<Decay, Decay::kDecoupled>{});
      break;
    case Decay::kL2:
      run(std::integral_constant<Decay, Decay::kL2>{});
      break;
  }
}

// Note [One kernel per instruction set]
// The library is compiled for the x86-64 baseline, whose SSE2 has no fused
// multiply-add: std::fma would be a call per element. GCC compiles each
// function below once per instruction set listed and picks one when the
// program starts (target_clones), so the loop is vectorized with AVX-512
// or AVX2 and FMA where the processor has them. The values do not depend on
// the one picked: every operation is IEEE-rounded the same at every width.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define DDP_ADAM_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define DDP_ADAM_CLONES
#endif

DDP_ADAM_CLONES void update_float(const AdamScalars<float>& s, float* param, const float* grad,
                                  float* exp_avg, float* exp_avg_sq, float* max_exp_avg_sq,
                                  int64_t n) {
  update_any(s, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, n);
}

DDP_ADAM_CLONES void update_double(const AdamScalars<double>& s, double* param, const double* grad,
                                   double* exp_avg, double* exp_avg_sq, double* max_exp_avg_sq,
                                   int64_t n) {
  update_any(s, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, n);
}

inline void update(const AdamScalars<float>& s, float* p, const float* g, float* m, float* v,
                   float* mx, int64_t n) {
  update_float(s, p, g, m, v, mx, n);
}
inline void update(const AdamScalars<double>& s, double* p, const double* g, double* m, double* v,
                   double* mx, int64_t n) {
  update_double(s, p, g, m, v, mx, n);
}

/// Elements per task: ATen's own grain for elementwise kernels.
constexpr int64_t kGrain = 32768;

}  // namespace

template <typename T>
void adam_update(const AdamScalars<T>& s, T* param, const T* grad, T* exp_avg, T* exp_avg_sq,
                 T* max_exp_avg_sq, int64_t n) {
  if (n <= kGrain) {  // no task to hand out: the many small pieces of FSDP's shards
    update(s, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, n);
    return;
  }
  at::parallel_for(0, n, kGrain, [&](int64_t begin, int64_t end) {
    update(s, param + begin, grad + begin, exp_avg + begin, exp_avg_sq + begin,
           max_exp_avg_sq != nullptr ? max_exp_avg_sq + begin : nullptr, end - begin);
  });
}

template void adam_update<float>(const AdamScalars<float>&, float*, const float*, float*, float*,
                                 float*, int64_t);
template void adam_update<double>(const AdamScalars<double>&, double*, const double*, double*,
                                  double*, double*, int64_t);

}  // namespace ddp::optim::detail

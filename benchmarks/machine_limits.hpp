#pragma once

// This machine's limits, measured with what LibTorch runs on here: one
// core's single-precision matrix-product rate through LibTorch's BLAS
// (torch::mm, 2048^3) and one core's memory bandwidth (STREAM's triad, and
// the access pattern of an Adam step: four arrays read, three written).
// The figures that MFU and "share of bandwidth" are taken over.

#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <vector>

namespace ddp_bench {

struct MachineLimits {
  double sgemm_gflops = 0;      ///< one thread, fp32, 2048 x 2048 x 2048
  double triad_gbs = 0;         ///< a = b + s * c, 12 bytes an element
  double adam_pattern_gbs = 0;  ///< 4 arrays read, 3 written, 28 bytes an element
};

/// The best of `reps` timings of `f`, in seconds.
template <typename F>
double best_seconds(int reps, F&& f) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f();
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

/// Adam's access pattern with the least arithmetic: p, m, v read and
/// written, g read; vectorized (-O3 for this function alone).
__attribute__((optimize("O3"), noinline)) inline void adam_pattern(float* __restrict p,
                                                                   float* __restrict m,
                                                                   float* __restrict v,
                                                                   const float* __restrict g,
                                                                   int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float gi = g[i];
    m[i] = m[i] * 0.9f + gi;
    v[i] = v[i] * 0.99f + gi * gi;
    p[i] = p[i] - 1e-3f * m[i];
  }
}

/// Measures the limits on the calling thread (LibTorch's intra-op threads
/// should be 1: the figures are per core).
inline MachineLimits measure_machine_limits() {
  MachineLimits limits;
  {
    const int64_t n = 2048;
    const at::Tensor a = torch::randn({n, n}), b = torch::randn({n, n});
    at::Tensor c = torch::mm(a, b);
    const double s = best_seconds(5, [&] { at::mm_out(c, a, b); });
    limits.sgemm_gflops = 2.0 * n * n * n / s / 1e9;
  }
  const int64_t n = int64_t{1} << 25;  // 128 MiB an array: far beyond any cache
  {
    // ATen's own vectorized kernel: a = b + 3 c.
    const at::Tensor b = torch::rand({n}), c = torch::rand({n});
    at::Tensor a = torch::empty({n});
    const double s = best_seconds(10, [&] { at::add_out(a, b, c, 3); });
    limits.triad_gbs = 12.0 * n / s / 1e9;
  }
  {
    std::vector<float> p(n, 1.f), m(n, 2.f), v(n, 3.f), g(n, 4.f);
    const double s =
        best_seconds(10, [&] { adam_pattern(p.data(), m.data(), v.data(), g.data(), n); });
    limits.adam_pattern_gbs = 28.0 * n / s / 1e9;
  }
  return limits;
}

}  // namespace ddp_bench

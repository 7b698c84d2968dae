#pragma once

// This machine's limits, measured with what LibTorch runs on here: one
// core's single-precision matrix-product rate through LibTorch's BLAS and
// one core's memory bandwidth (a += s b in place), as
// ddp::training::measure_machine_peak() measures them, and the access
// pattern of an Adam step (four arrays read, three written).
// The figures that MFU and "share of bandwidth" are taken over.

#include <torch/torch.h>

#include "ddp/training/machine_peak.hpp"

#include <algorithm>
#include <chrono>
#include <vector>

namespace ddp_bench {

struct MachineLimits {
  double sgemm_gflops = 0;      ///< one thread, fp32, 1024 x 1024 x 1024
  double memory_gbs = 0;        ///< a += s * b in place, 12 bytes an element
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

/// Measures the limits on the calling thread: sgemm and the bandwidth as
/// ddp::training::measure_machine_peak() does (what MFU is taken over
/// everywhere), Adam's pattern here.
inline MachineLimits measure_machine_limits() {
  const ddp::training::MachinePeak peak = ddp::training::measure_machine_peak();
  MachineLimits limits;
  limits.sgemm_gflops = peak.sgemm_gflops_per_core;
  limits.memory_gbs = peak.memory_gbs_per_core;
  const int64_t n = int64_t{1} << 25;  // 128 MiB an array: far beyond any cache
  std::vector<float> p(n, 1.f), m(n, 2.f), v(n, 3.f), g(n, 4.f);
  const double s =
      best_seconds(10, [&] { adam_pattern(p.data(), m.data(), v.data(), g.data(), n); });
  limits.adam_pattern_gbs = 28.0 * n / s / 1e9;
  return limits;
}

}  // namespace ddp_bench

#pragma once

// Small timing helpers shared by the benchmarks (header-only).

#include <algorithm>
#include <chrono>
#include <vector>

namespace ddp_bench {

using Clock = std::chrono::steady_clock;

/// Spins the calling thread until `length` of wall time has passed: a gap
/// whose length is wall time, whatever else shares the core.
inline void spin(std::chrono::duration<double> length) {
  const auto end = Clock::now() + std::chrono::duration_cast<Clock::duration>(length);
  while (Clock::now() < end) {
  }
}

/// The median of `values` (the mean of the middle two for an even count).
inline double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t n = values.size();
  return n % 2 ? values[n / 2] : (values[n / 2 - 1] + values[n / 2]) / 2;
}

}  // namespace ddp_bench

#pragma once

// How far a result is from its reference, relative to the reference's
// magnitude: the measure the tests compare with a tolerance. Computed in
// float64 on the CPU whatever the tensors' dtype and device, so that half,
// bfloat16 and CUDA results are measured alike. A NaN anywhere makes the
// error NaN, which fails every `error <= tolerance`.

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace ddp::testing {

/// The larger of a and b, or NaN when either is (std::max(0, NaN) is 0,
/// and a NaN result would pass).
inline double max_keeping_nan(double a, double b) {
  return std::isnan(a) || std::isnan(b) ? std::numeric_limits<double>::quiet_NaN() : std::max(a, b);
}

/// max|got - expected| / max(max|expected|, floor), in float64; 0 for two
/// empty tensors, infinity when the shapes differ. `floor` keeps tensors
/// near zero (young biases, say) from turning rounding noise into large
/// errors.
inline double relative_error(const at::Tensor& got, const at::Tensor& expected,
                             double floor = 1e-12) {
  if (got.sizes() != expected.sizes()) return std::numeric_limits<double>::infinity();
  if (got.numel() == 0) return 0;
  const auto a = got.detach().to(at::kCPU, at::kDouble);
  const auto b = expected.detach().to(at::kCPU, at::kDouble);
  const double scale = std::max(b.abs().max().item<double>(), floor);
  return (a - b).abs().max().item<double>() / scale;
}

/// The worst relative_error() of the pairs got[i], expected[i] (a model's
/// parameters, say); infinity when the lists differ in length, NaN when
/// any pair's is.
inline double worst_relative_error(const std::vector<at::Tensor>& got,
                                   const std::vector<at::Tensor>& expected, double floor = 1e-12) {
  if (got.size() != expected.size()) return std::numeric_limits<double>::infinity();
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    worst = max_keeping_nan(worst, relative_error(got[i], expected[i], floor));
  }
  return worst;
}

}  // namespace ddp::testing

#pragma once

// Worker side of named checks: a multi-process test's worker reports each
// check by name, one line each, so that the parent test can assert the
// exact set of checks that ran and show the first failure with its values
// (tests/common/expect_checks.hpp reads the lines).
//
//   check <name>: ok
//   check <name>: FAILED: <what was wrong, with the values>

#include <torch/torch.h>

#include <algorithm>
#include <iostream>
#include <limits>
#include <string>
#include <vector>

namespace ddp::testing {

/// Records checks and prints each as it is made.
class NamedChecks {
 public:
  explicit NamedChecks(std::ostream& out = std::cout) : out_(out) {}

  /// Records check `name`: passed when `ok`; `detail` explains a failure.
  void check(const std::string& name, bool ok, const std::string& detail = "") {
    if (ok) {
      out_ << "check " << name << ": ok\n";
    } else {
      ++failed_;
      out_ << "check " << name << ": FAILED: " << detail << "\n";
    }
    out_.flush();
  }

  /// Passes when max|got - expected| <= tolerance * max(max|expected|, 1e-12),
  /// both compared in float64, shapes equal.
  void close(const std::string& name, const at::Tensor& got, const at::Tensor& expected,
             double tolerance) {
    if (got.sizes() != expected.sizes()) {
      check(name, false, "shape " + shapeOf(got) + ", expected " + shapeOf(expected));
      return;
    }
    const double error = relative_error(got, expected);
    check(name, error <= tolerance,
          "max relative error " + std::to_string(error) + " > tolerance " +
              std::to_string(tolerance));
  }

  /// As close() for lists of tensors (a model's parameters), pair by pair:
  /// the worst relative error counts. Fails with `error` when that is not
  /// empty (what the run that produced `got` threw).
  void close_all(const std::string& name, const std::vector<at::Tensor>& got,
                 const std::vector<at::Tensor>& expected, double tolerance,
                 const std::string& error = "") {
    if (!error.empty()) {
      check(name, false, "threw: " + error);
      return;
    }
    if (got.size() != expected.size()) {
      check(name, false,
            std::to_string(got.size()) + " tensors, expected " + std::to_string(expected.size()));
      return;
    }
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double e = got[i].sizes() == expected[i].sizes()
                           ? relative_error(got[i], expected[i])
                           : std::numeric_limits<double>::infinity();
      if (!(e <= worst)) worst = e;  // keeps a NaN
    }
    check(name, worst <= tolerance,
          "max relative error " + std::to_string(worst) + " > tolerance " +
              std::to_string(tolerance));
  }

  /// Passes when `got` equals `expected` element for element (same shape).
  void equal(const std::string& name, const at::Tensor& got, const at::Tensor& expected) {
    const auto a = got.to(at::kCPU, at::kDouble);
    const auto b = expected.to(at::kCPU, at::kDouble);
    const bool same = got.sizes() == expected.sizes() && a.equal(b);
    check(name, same, same ? "" : "got " + preview(a) + ", expected " + preview(b));
  }

  /// Checks failed so far.
  int failed() const noexcept { return failed_; }

  /// max|got - expected| / max(max|expected|, 1e-12), in float64.
  static double relative_error(const at::Tensor& got, const at::Tensor& expected) {
    if (got.numel() == 0) return 0;
    const auto a = got.detach().to(at::kCPU, at::kDouble);
    const auto b = expected.detach().to(at::kCPU, at::kDouble);
    const double scale = std::max(b.abs().max().item<double>(), 1e-12);
    return (a - b).abs().max().item<double>() / scale;
  }

 private:
  static std::string shapeOf(const at::Tensor& t) {
    std::string text = "[";
    for (size_t i = 0; i < t.sizes().size(); ++i) {
      text += (i ? ", " : "") + std::to_string(t.sizes()[i]);
    }
    return text + "]";
  }

  // The first few values, for a failure message.
  static std::string preview(const at::Tensor& t) {
    const auto flat = t.reshape({-1});
    std::string text = shapeOf(t) + " {";
    const int64_t shown = std::min<int64_t>(flat.numel(), 6);
    for (int64_t i = 0; i < shown; ++i) {
      text += (i ? ", " : "") + std::to_string(flat[i].item<double>());
    }
    return text + (flat.numel() > shown ? ", ...}" : "}");
  }

  std::ostream& out_;
  int failed_ = 0;
};

}  // namespace ddp::testing

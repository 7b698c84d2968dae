#pragma once

// Worker side of named checks: a multi-process test's worker reports each
// check by name, one line each, so that the parent test can assert the
// exact set of checks that ran and show the first failure with its values
// (tests/common/expect_checks.hpp reads the lines). Each name is written
// once, in the suite's *_checks.hpp, which the worker's checks and the
// parent test's expected set both use.
//
//   check <name>: ok
//   check <name>: FAILED: <what was wrong, with the values>

#include <torch/torch.h>

#include <algorithm>
#include <iostream>
#include <string>
#include <vector>

#include "common/relative_error.hpp"

namespace ddp::testing {

/// "<subject>: <check>", the name of a check a suite makes for each of
/// several subjects (cases, models, optimizers), so that the suite's header
/// writes each part of the name once.
inline std::string check_name(const std::string& subject, const std::string& check) {
  return subject + ": " + check;
}

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
  /// both compared in float64 (common/relative_error.hpp), shapes equal.
  void close(const std::string& name, const at::Tensor& got, const at::Tensor& expected,
             double tolerance) {
    if (got.sizes() != expected.sizes()) {
      check(name, false, "shape " + shape_of(got) + ", expected " + shape_of(expected));
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
    const double worst = worst_relative_error(got, expected);  // infinite where shapes differ
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

  /// ddp::testing::relative_error(), under the name the GPU tests use.
  static double relative_error(const at::Tensor& got, const at::Tensor& expected) {
    return testing::relative_error(got, expected);
  }

 private:
  static std::string shape_of(const at::Tensor& t) {
    std::string text = "[";
    for (size_t i = 0; i < t.sizes().size(); ++i) {
      text += (i ? ", " : "") + std::to_string(t.sizes()[i]);
    }
    return text + "]";
  }

  // The first few values, for a failure message.
  static std::string preview(const at::Tensor& t) {
    const auto flat = t.reshape({-1});
    std::string text = shape_of(t) + " {";
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

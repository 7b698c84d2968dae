#pragma once

// What the examples' tests share: running an example alone or under the real
// ddprun with a deadline, reading its final line and digest, and skipping
// when Fashion-MNIST or gnuplot is not installed.

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <map>
#include <optional>
#include <regex>
#include <string>
#include <vector>

#include "ddp/launch/child_process.hpp"
#include "ddp/training/errors.hpp"
#include "ddp/training/plot.hpp"

namespace ddp::testing {

using launch::ChildResult;
using launch::ChildSpec;

inline const char* const kLauncherVariables[] = {
    "RANK",       "WORLD_SIZE",  "LOCAL_RANK", "LOCAL_WORLD_SIZE",
    "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"};

// Runs `argv` to its end (at most `deadline`), outside any launcher.
inline ChildResult run(std::vector<std::string> argv, std::map<std::string, std::string> env = {},
                       std::chrono::seconds deadline = std::chrono::seconds(120)) {
  ChildSpec spec{std::move(argv), std::move(env), {}};
  for (const char* name : kLauncherVariables) spec.unset_env.push_back(name);
  return ddp::launch::run_children({spec}, deadline).at(0);
}

// `program args...` under ddprun with `nproc` workers on this machine.
inline std::vector<std::string> under_ddprun(int nproc, const std::string& program,
                                             std::vector<std::string> args) {
  std::vector<std::string> argv = {DDP_DDPRUN, "--standalone", "--nproc-per-node",
                                   std::to_string(nproc), program};
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}

struct FinalLine {
  double loss = NAN;
  std::optional<double> accuracy;
};

// The example's last result line: "final loss=L accuracy=A" (accuracy optional).
inline FinalLine final_line(const std::string& output) {
  std::smatch m;
  FinalLine line;
  if (std::regex_search(output, m, std::regex(R"(final loss=(\S+)(?: accuracy=(\S+))?\n)"))) {
    line.loss = std::stod(m[1]);
    if (m[2].matched) line.accuracy = std::stod(m[2]);
  }
  return line;
}

inline std::string digest_of(const std::string& output) {
  std::smatch m;
  return std::regex_search(output, m, std::regex(R"(params-digest=([0-9a-f]{16}))")) ? m[1].str()
                                                                                     : "<none>";
}

inline bool gnuplot_installed() {
  try {
    ddp::training::require_gnuplot();
    return true;
  } catch (const ddp::PlotError&) {
    return false;
  }
}

inline bool fashion_mnist_installed() {
  return std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte.gz") ||
         std::filesystem::exists("/usr/share/datasets/fashion-mnist/train-images-idx3-ubyte");
}

inline size_t count(const std::string& text, const std::string& part) {
  size_t n = 0;
  for (size_t at = text.find(part); at != std::string::npos; at = text.find(part, at + 1)) ++n;
  return n;
}

}  // namespace ddp::testing

// Skips the test when Fashion-MNIST is not installed. A macro, not a helper:
// GTEST_SKIP() returns only from the function it is in, so in a helper the
// test would go on and fail for want of the data.
#define DDP_REQUIRE_FASHION_MNIST() \
  if (!fashion_mnist_installed())   \
  GTEST_SKIP() << "Fashion-MNIST is not installed (Debian package dataset-fashion-mnist)"

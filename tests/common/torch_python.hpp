#pragma once

// The python3 that tests run as the real PyTorch: Debian's python3-torch
// (1.13 in /usr/bin on Debian 12, 2.6 in CI's Debian 13 root). Tests that
// need it skip without it, and fail instead where CI requires their suite
// (Note [A skip CI does not allow] in common/required_suites.hpp).

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "common/required_suites.hpp"
#include "ddp/launch/child_process.hpp"

namespace ddp::testing {

/// The directory of the first python3 that imports torch.distributed:
/// /usr/bin's, else the first in PATH that does; "" when none does.
inline const std::string& torch_python_dir() {
  static const std::string dir = [] {
    namespace fs = std::filesystem;
    std::vector<std::string> candidates = {"/usr/bin/python3"};
    const char* path = std::getenv("PATH");
    const std::string rest = path ? path : "";
    for (size_t start = 0; start <= rest.size();) {
      size_t end = rest.find(':', start);
      if (end == std::string::npos) end = rest.size();
      if (end > start) candidates.push_back(rest.substr(start, end - start) + "/python3");
      start = end + 1;
    }
    for (const std::string& python : candidates) {
      if (!fs::exists(python)) continue;
      launch::ChildSpec probe{
          {python, "-c", "import torch.distributed as d; assert d.is_available()"}, {}, {}};
      if (launch::run_children({probe}, std::chrono::seconds(60)).at(0).exit_code == 0) {
        return fs::path(python).parent_path().string();
      }
    }
    return std::string();
  }();
  return dir;
}

/// That python3's path; "" when there is none.
inline std::string torch_python() {
  return torch_python_dir().empty() ? "" : torch_python_dir() + "/python3";
}

}  // namespace ddp::testing

/// Skips (or, where CI requires the suite, fails) the running test when
/// there is no python3 with PyTorch.
#define SKIP_WITHOUT_TORCH()                                        \
  if (::ddp::testing::torch_python_dir().empty())                   \
  DDP_SKIP_UNLESS_REQUIRED(                                         \
      "no python3 with PyTorch (torch.distributed) in /usr/bin or " \
      "PATH; install Debian's python3-torch (scripts/install-deps.sh) to run this test")

#pragma once

// The suites a CI leg must run: where CI is set, a test of one of them that
// would skip because its launcher or PyTorch is missing or broken fails
// instead, with the same reason (Note [A skip CI does not allow]).
//
//   if (mpirun().empty()) DDP_SKIP_UNLESS_REQUIRED("no mpirun on PATH; install ...");

#include <gtest/gtest.h>

#include <cstdlib>
#include <sstream>
#include <string>

// Note [A skip CI does not allow]
// ctest counts a GTEST_SKIP as a pass, so a CI machine that lost mpirun,
// Slurm or PyTorch would go on passing without running what the project
// says it tests. Each CI leg therefore declares the suites it must run
// (scripts/run-tests.sh for the host, scripts/libtorch2.sh for the Debian 13
// root) and passes them to ctest as DDP_REQUIRED_SUITES. Where CI is set,
// a test of a listed suite fails instead of skipping; a suite the leg does
// not list still skips with its reason (the host's torchrun is PyTorch
// 1.13's, which InteropTorchrun cannot use, and that is a fact of the leg,
// not a broken install). Without CI, a developer machine without Slurm
// passes with skips. scripts/check-required-suites.sh then checks from
// ctest's report that every listed suite ran and skipped nothing.

namespace ddp::testing {

/// The gtest suite of the running test without a parameterised
/// instantiation's prefix ("InteropMpirun/InteropMpirun" -> "InteropMpirun").
inline std::string current_suite() {
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string suite = info ? info->test_suite_name() : "";
  return suite.substr(suite.rfind('/') + 1);
}

/// The entry of DDP_REQUIRED_SUITES (space-separated) that covers `suite`:
/// one that `suite` starts with, as `ctest -R` matches a part
/// ("InteropMpirun" covers InteropMpirunErrors); "" when none does.
inline std::string required_entry_for(const std::string& suite) {
  const char* listed = std::getenv("DDP_REQUIRED_SUITES");
  std::istringstream entries(listed ? listed : "");
  for (std::string entry; entries >> entry;) {
    if (suite.rfind(entry, 0) == 0) return entry;
  }
  return "";
}

/// Why the running test may not skip: CI is set and the leg requires its
/// suite. "" when a skip is allowed.
inline std::string why_a_skip_is_a_failure() {
  const char* ci = std::getenv("CI");
  if (ci == nullptr || *ci == '\0') return "";
  const std::string entry = required_entry_for(current_suite());
  if (entry.empty()) return "";
  return "CI is set (CI=" + std::string(ci) + ") and this leg requires suite " + entry +
         " (DDP_REQUIRED_SUITES='" + std::getenv("DDP_REQUIRED_SUITES") +
         "'), so this is a failure, not a skip: install what is missing, or take the suite "
         "out of the leg's list (scripts/run-tests.sh, scripts/libtorch2.sh) saying why";
}

}  // namespace ddp::testing

/// Skips the running test with `reason`, or fails it with `reason` where CI
/// requires its suite (Note [A skip CI does not allow]). Returns from the
/// calling function, as GTEST_SKIP does. The switch is gtest's guard against
/// an `else` of the caller's binding to this `if`.
#define DDP_SKIP_UNLESS_REQUIRED(reason)                                            \
  switch (0)                                                                        \
  case 0:                                                                           \
  default:                                                                          \
    if (const std::string ddp_why_not_ = ::ddp::testing::why_a_skip_is_a_failure(); \
        !ddp_why_not_.empty())                                                      \
      GTEST_FAIL() << (reason) << "\n" << ddp_why_not_;                             \
    else                                                                            \
      GTEST_SKIP() << (reason)

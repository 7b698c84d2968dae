#pragma once

// Parent side of named checks (tests/common/named_checks.hpp): asserts that
// every rank exited 0 and reported exactly the expected check names, all
// passed; a failure names the rank, the check and its values.

#include <gtest/gtest.h>

#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "launch/child_process.hpp"

namespace ddp::testing {

/// The checks one worker reported: name -> "" when it passed, else the
/// failure detail.
inline std::map<std::string, std::string> parseChecks(const std::string& output) {
  std::map<std::string, std::string> checks;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("check ", 0) != 0) continue;
    const auto colon = line.find(": ", 6);
    if (colon == std::string::npos) continue;
    const std::string name = line.substr(6, colon - 6);
    const std::string verdict = line.substr(colon + 2);
    checks[name] = verdict == "ok" ? "" : verdict;
  }
  return checks;
}

/// Every rank of `results` exited 0 and reported exactly `expected`, each
/// passed. Each failure is a separate gtest failure that names the rank.
inline void expectChecks(const std::vector<launch::ChildResult>& results,
                         const std::set<std::string>& expected) {
  for (size_t rank = 0; rank < results.size(); ++rank) {
    const auto& result = results[rank];
    const auto checks = parseChecks(result.output);
    for (const auto& [name, failure] : checks) {
      if (!failure.empty()) ADD_FAILURE() << "rank " << rank << ": check " << name << " " << failure;
    }
    std::vector<std::string> missing, unexpected;
    for (const auto& name : expected) {
      if (!checks.count(name)) missing.push_back(name);
    }
    for (const auto& [name, failure] : checks) {
      if (!expected.count(name)) unexpected.push_back(name);
    }
    auto list = [](const std::vector<std::string>& names) {
      std::string text;
      for (const auto& n : names) text += (text.empty() ? "" : ", ") + n;
      return text;
    };
    EXPECT_TRUE(missing.empty()) << "rank " << rank << " did not report " << missing.size()
                                 << " check(s): " << list(missing) << "\n--- its output (pid "
                                 << result.pid << ", " << result.status() << "):\n"
                                 << result.output;
    EXPECT_TRUE(unexpected.empty()) << "rank " << rank << " reported unexpected check(s): "
                                    << list(unexpected);
    EXPECT_EQ(result.exit_code, 0) << "rank " << rank << " (pid " << result.pid << "): "
                                   << result.status() << "\n" << result.output;
  }
}

}  // namespace ddp::testing

#pragma once

// Parent side of named checks (tests/common/named_checks.hpp): asserts that
// every rank exited 0 and reported exactly the expected check names, all
// passed; a failure names the rank, the check and its values.

#include <gtest/gtest.h>

#include <functional>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "ddp/launch/child_process.hpp"

namespace ddp::testing {

/// The checks one worker reported: name -> "" when it passed, else the
/// failure detail. A name reported more than once counts as a failure
/// (names must be unique, or one report could hide another).
inline std::map<std::string, std::string> parse_checks(const std::string& output) {
  std::map<std::string, std::string> checks;
  std::istringstream lines(output);
  std::string line;
  while (std::getline(lines, line)) {
    if (line.rfind("check ", 0) != 0) continue;
    // Names may contain ": ": a pass ends with ": ok", a failure has the
    // first ": FAILED: " after the name.
    std::string name, failure;
    const std::string passed = ": ok", failed = ": FAILED: ";
    const auto fail_at = line.find(failed, 6);
    if (fail_at != std::string::npos) {
      name = line.substr(6, fail_at - 6);
      failure = "FAILED: " + line.substr(fail_at + failed.size());
    } else if (line.size() >= 6 + passed.size() &&
               line.compare(line.size() - passed.size(), passed.size(), passed) == 0) {
      name = line.substr(6, line.size() - passed.size() - 6);
    } else {
      continue;
    }
    const auto [it, first] = checks.emplace(name, failure);
    if (!first) {
      it->second = "reported more than once" + (it->second.empty() ? "" : "; " + it->second) +
                   (failure.empty() ? "" : "; " + failure);
    }
  }
  return checks;
}

/// Every rank R of `results` exited 0 and reported exactly the checks
/// `expected_for(R)`, each passed (for checks that only some ranks make).
/// Each failure is a separate gtest failure that names the rank.
inline void expect_checks_per_rank(
    const std::vector<launch::ChildResult>& results,
    const std::function<std::set<std::string>(int rank)>& expected_for) {
  for (size_t rank = 0; rank < results.size(); ++rank) {
    const auto& result = results[rank];
    const std::set<std::string> expected = expected_for(static_cast<int>(rank));
    const auto checks = parse_checks(result.output);
    for (const auto& [name, failure] : checks) {
      if (!failure.empty())
        ADD_FAILURE() << "rank " << rank << ": check " << name << " " << failure;
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
    EXPECT_TRUE(unexpected.empty())
        << "rank " << rank << " reported unexpected check(s): " << list(unexpected);
    EXPECT_EQ(result.exit_code, 0)
        << "rank " << rank << " (pid " << result.pid << "): " << result.status() << "\n"
        << result.output;
  }
}

/// Every rank of `results` exited 0 and reported exactly `expected`, each
/// passed. Each failure is a separate gtest failure that names the rank.
inline void expect_checks(const std::vector<launch::ChildResult>& results,
                          const std::set<std::string>& expected) {
  expect_checks_per_rank(results, [&](int) { return expected; });
}

}  // namespace ddp::testing

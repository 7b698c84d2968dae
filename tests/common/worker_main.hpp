#pragma once

// The main() of a multi-process test's worker: one rank, started N times by
// the harness (tests/multiprocess/harness.hpp) as
//
//   WORKER SCENARIO [ARGUMENTS...]
//
// runs the scenario named, whose checks print one line each
// (tests/common/named_checks.hpp), and exits with
//   the scenario's code       0 when every check passed, 1 when one failed
//                             (checks_exit_code), or the scenario's own;
//   2                         when no scenario has that name (with the usage);
//   ddp::exit_code_for(e)     after "error: <message>", for a ddp::Error e;
//   1                         after "unexpected error: <message>", for any
//                             other exception.

#include <functional>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include "ddp/base/errors.hpp"

namespace ddp::testing {

/// One scenario of a worker: given the arguments after its name, runs and
/// returns the exit code.
using WorkerScenario = std::function<int(const std::vector<std::string>& arguments)>;

/// The exit code of a rank whose checks are done: 0 when none of them
/// failed, else 1, after saying "rank R: N check(s) failed".
inline int checks_exit_code(int rank, int failed) {
  if (failed == 0) return 0;
  std::cout << "rank " << rank << ": " << failed << " check(s) failed" << std::endl;
  return 1;
}

/// A worker's main(): runs the scenario argv[1] names, with argv[2...], and
/// maps what it throws to an exit code (see the top of this file).
inline int run_worker(int argc, char** argv,
                      const std::map<std::string, WorkerScenario>& scenarios) {
  const auto scenario = argc > 1 ? scenarios.find(argv[1]) : scenarios.end();
  if (scenario == scenarios.end()) {
    std::string names;
    for (const auto& [name, run] : scenarios) names += (names.empty() ? "" : "|") + name;
    std::cerr << "usage: " << (argc > 0 ? argv[0] : "worker") << " " << names << " [ARGUMENTS...]"
              << std::endl;
    return 2;
  }
  try {
    return scenario->second(std::vector<std::string>(argv + 2, argv + argc));
  } catch (const ddp::Error& e) {
    std::cout.flush();
    std::cerr << "error: " << e.what() << std::endl;
    return static_cast<int>(ddp::exit_code_for(e));
  } catch (const std::exception& e) {
    std::cout.flush();
    std::cerr << "unexpected error: " << e.what() << std::endl;
    return 1;
  }
}

}  // namespace ddp::testing

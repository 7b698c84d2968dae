#pragma once

// Checks of every collective against closed-form values, run on each rank
// of a real process group by ddp_test_worker.

#include <string>
#include <vector>

#include "ddp/process_group.hpp"

namespace ddp::testing {

/// Outcome of a set of checks on one rank.
struct CheckReport {
  int passed = 0;
  std::vector<std::string> failures;
};

/// Runs all-reduce (every op), broadcast (every root), all-gather,
/// reduce-scatter (every op), barrier, and asynchronous variants, for every
/// supported dtype, and compares each result with its closed form.
CheckReport checkAllCollectives(ProcessGroup& group);

}  // namespace ddp::testing

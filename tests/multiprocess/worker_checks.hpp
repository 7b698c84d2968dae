#pragma once

// Checks of every collective against closed-form values, run on each rank
// of a real process group by ddp_test_worker. Each check is reported by name
// (tests/common/named_checks.hpp); the parent tests expect the names that
// collectiveCheckNames() builds from the same plan.

#include <c10/core/ScalarType.h>

#include <set>
#include <string>
#include <vector>

#include "ddp/process_group.hpp"
#include "dtype_name.hpp"

namespace ddp::testing {

/// The plan: every collective is checked in each of these dtypes...
inline std::vector<at::ScalarType> collectiveDtypes() {
  return {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf, at::kInt, at::kLong};
}

/// ...and all-reduce and reduce-scatter with each of these ops.
inline std::vector<ReduceOp> collectiveOps() {
  return {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};
}

/// Runs all-reduce (every op), broadcast (every root), all-gather,
/// reduce-scatter (every op), barrier, and asynchronous variants, for every
/// dtype of the plan, and compares each result with its closed form.
/// Prints each check by name; returns how many failed.
int checkAllCollectives(ProcessGroup& group);

/// The names checkAllCollectives() reports on every rank of a group of
/// `world`, built from the plan for the parent test.
inline std::set<std::string> collectiveCheckNames(int world) {
  std::set<std::string> names{"barrier waited for the last rank"};
  for (auto dtype : collectiveDtypes()) {
    const std::string d = " " + detail::dtypeName(dtype);
    for (auto op : collectiveOps()) {
      names.insert(std::string("all_reduce(") + to_string(op) + ")" + d);
      names.insert(std::string("reduce_scatter(") + to_string(op) + ")" + d);
    }
    for (int root = 0; root < world; ++root) {
      names.insert("broadcast(root " + std::to_string(root) + ")" + d);
    }
    names.insert("all_gather" + d);
    for (int k = 0; k < 3; ++k) names.insert("all_reduce_async #" + std::to_string(k) + d);
    names.insert("all_gather_async" + d);
    names.insert("is_completed after wait" + d);
  }
  return names;
}

}  // namespace ddp::testing

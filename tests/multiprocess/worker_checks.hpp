#pragma once

// Checks of every collective against closed-form values, run on each rank
// of a real process group by ddp_test_worker. Each check is reported by name
// (tests/common/named_checks.hpp), each name built once, below; the parent
// tests expect the names that collective_check_names() builds from the same
// plan.

#include <c10/core/ScalarType.h>

#include <set>
#include <string>
#include <vector>

#include "base/dtype_name.hpp"
#include "ddp/comm/process_group_fwd.hpp"
#include "ddp/comm/reduce_op.hpp"

namespace ddp::testing {

/// The plan: every collective is checked in each of these dtypes...
inline std::vector<at::ScalarType> collective_dtypes() {
  return {at::kFloat, at::kDouble, at::kBFloat16, at::kHalf, at::kInt, at::kLong};
}

/// ...and all-reduce and reduce-scatter with each of these ops.
inline std::vector<ReduceOp> collective_ops() {
  return {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMin, ReduceOp::kMax, ReduceOp::kProduct};
}

/// Runs all-reduce (every op), broadcast (every root), all-gather,
/// reduce-scatter (every op), barrier, and asynchronous variants, for every
/// dtype of the plan, and compares each result with its closed form.
/// Prints each check by name; returns how many failed.
int check_all_collectives(ProcessGroup& group);

/// The names of check_all_collectives()'s checks, each collective's in each
/// dtype ("all_reduce(sum) float32").
namespace collective_check {
inline std::string all_reduce(ReduceOp op, at::ScalarType dtype) {
  return std::string("all_reduce(") + to_string(op) + ") " + ddp::base::detail::dtype_name(dtype);
}
inline std::string reduce_scatter(ReduceOp op, at::ScalarType dtype) {
  return std::string("reduce_scatter(") + to_string(op) + ") " +
         ddp::base::detail::dtype_name(dtype);
}
inline std::string broadcast(int root, at::ScalarType dtype) {
  return "broadcast(root " + std::to_string(root) + ") " + ddp::base::detail::dtype_name(dtype);
}
inline std::string all_gather(at::ScalarType dtype) {
  return "all_gather " + ddp::base::detail::dtype_name(dtype);
}
/// Asynchronous collectives in flight at once: kAsyncAllReduces
/// all-reduces (#0, #1, ...) and an all-gather, then each one's completion.
constexpr int kAsyncAllReduces = 3;
inline std::string all_reduce_async(int k, at::ScalarType dtype) {
  return "all_reduce_async #" + std::to_string(k) + " " + ddp::base::detail::dtype_name(dtype);
}
inline std::string all_gather_async(at::ScalarType dtype) {
  return "all_gather_async " + ddp::base::detail::dtype_name(dtype);
}
inline std::string completed_after_wait(at::ScalarType dtype) {
  return "is_completed after wait " + ddp::base::detail::dtype_name(dtype);
}
inline const std::string kBarrier = "barrier waited for the last rank";
}  // namespace collective_check

/// The names check_all_collectives() reports on every rank of a group of
/// `world`, built from the plan for the parent test.
inline std::set<std::string> collective_check_names(int world) {
  using namespace collective_check;  // NOLINT(google-build-using-namespace)
  std::set<std::string> names{kBarrier};
  for (auto dtype : collective_dtypes()) {
    for (auto op : collective_ops()) {
      names.insert(all_reduce(op, dtype));
      names.insert(reduce_scatter(op, dtype));
    }
    for (int root = 0; root < world; ++root) names.insert(broadcast(root, dtype));
    names.insert(all_gather(dtype));
    for (int k = 0; k < kAsyncAllReduces; ++k) names.insert(all_reduce_async(k, dtype));
    names.insert(all_gather_async(dtype));
    names.insert(completed_after_wait(dtype));
  }
  return names;
}

}  // namespace ddp::testing

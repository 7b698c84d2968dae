#pragma once

// Checks of the shared-memory backend run on each rank by ddp_test_worker:
// results equal Gloo's and the closed form, for every dtype and op, sizes
// from one element to 64 MiB; and a stress loop of overlapping collectives.
// Each check is reported by name (tests/common/named_checks.hpp); the plan
// below drives the checks and the parent tests' expected names alike.

#include <c10/core/ScalarType.h>

#include <random>
#include <set>
#include <string>
#include <vector>

#include "base/dtype_name.hpp"
#include "ddp/comm/process_group_fwd.hpp"
#include "ddp/comm/reduce_op.hpp"
#include "multiprocess/worker_checks.hpp"

namespace ddp::testing {

/// Sizes checked in `dtype`: odd ones, and more than one 4 MiB staging slot,
/// so that uneven shares and several rounds are covered for every element
/// size.
inline std::vector<int64_t> shm_sizes_for(at::ScalarType dtype) {
  const auto slot = static_cast<int64_t>((size_t{4} << 20) / c10::elementSize(dtype));
  return {1, 2, 3, 17, 4097, 65537, slot + 3};
}

/// Reduce-scatter moves world x numel elements: checked up to this numel
/// (one slot per chunk), with these ops.
constexpr int64_t kShmReduceScatterMaxNumel = 65537;
inline std::vector<ReduceOp> shm_reduce_scatter_ops() {
  return {ReduceOp::kSum, ReduceOp::kAverage, ReduceOp::kMax};
}

/// A float32 reduce-scatter whose chunks take more than one round.
inline int64_t shm_several_rounds_numel(int world) { return (int64_t{1} << 20) / world + 7; }

/// 64 MiB of float32, the benchmark's size, all-reduced with sum and average.
constexpr int64_t kShmBigNumel = (int64_t{64} << 20) / 4;

/// "all_reduce float32 x17": a check's collective, dtype and size.
inline std::string shm_check_name(const std::string& collective, at::ScalarType dtype,
                                  int64_t numel) {
  return collective + " " + base::detail::dtype_name(dtype) + " x" + std::to_string(numel);
}

/// All-reduce (every dtype of collective_dtypes(), op and size), broadcast
/// (every root), all-gather and reduce-scatter through `shm` against `gloo`
/// and the closed form. Prints each check by name; returns how many failed.
int check_shm_against_gloo(ProcessGroup& gloo, ProcessGroup& shm);

/// The names of check_shm_against_gloo()'s checks.
namespace shm_check {
/// How a result was compared: the last part of a check's name.
inline const std::string kVersusGloo = " (shm vs gloo)";
inline const std::string kVersusClosedForm = " (shm vs closed form)";
inline const std::string kClosedForm = " (closed form)";
/// "all_reduce float32 x17 sum on 3", compared with Gloo and the closed form.
inline std::string all_reduce(at::ScalarType dtype, int64_t numel, ReduceOp op, int world) {
  return shm_check_name("all_reduce", dtype, numel) + " " + to_string(op) + " on " +
         std::to_string(world);
}
inline std::string broadcast(at::ScalarType dtype, int64_t numel, int root) {
  return shm_check_name("broadcast", dtype, numel) + " from " + std::to_string(root);
}
inline std::string all_gather(at::ScalarType dtype, int64_t numel) {
  return shm_check_name("all_gather", dtype, numel);
}
/// "reduce_scatter float32 x17 sum", compared with Gloo and the closed form.
inline std::string reduce_scatter(at::ScalarType dtype, int64_t numel, ReduceOp op) {
  return shm_check_name("reduce_scatter", dtype, numel) + " " + to_string(op);
}
/// The float32 reduce-scatter of shm_several_rounds_numel(world), a sum.
inline std::string reduce_scatter_in_rounds(int world) {
  return shm_check_name("reduce_scatter", at::kFloat, shm_several_rounds_numel(world)) +
         " sum, several rounds";
}
/// The all-reduces of kShmBigNumel float32 elements, with these ops, each
/// compared with Gloo and the closed form.
inline std::vector<ReduceOp> big_all_reduce_ops() { return {ReduceOp::kSum, ReduceOp::kAverage}; }
inline std::string big_all_reduce(ReduceOp op) {
  return shm_check_name("all_reduce", at::kFloat, kShmBigNumel) + " " + to_string(op);
}
}  // namespace shm_check

/// The names check_shm_against_gloo() reports on every rank of `world`.
inline std::set<std::string> shm_against_gloo_check_names(int world) {
  using namespace shm_check;  // NOLINT(google-build-using-namespace)
  std::set<std::string> names{reduce_scatter_in_rounds(world)};
  for (auto dtype : collective_dtypes()) {
    for (int64_t numel : shm_sizes_for(dtype)) {
      for (auto op : collective_ops()) {
        names.insert(all_reduce(dtype, numel, op, world) + kVersusGloo);
        names.insert(all_reduce(dtype, numel, op, world) + kVersusClosedForm);
      }
      for (int root = 0; root < world; ++root) names.insert(broadcast(dtype, numel, root));
      names.insert(all_gather(dtype, numel));
      if (numel > kShmReduceScatterMaxNumel) continue;
      for (auto op : shm_reduce_scatter_ops()) {
        names.insert(reduce_scatter(dtype, numel, op) + kVersusGloo);
        names.insert(reduce_scatter(dtype, numel, op) + kClosedForm);
      }
    }
  }
  for (auto op : big_all_reduce_ops()) {
    names.insert(big_all_reduce(op) + kVersusGloo);
    names.insert(big_all_reduce(op) + kClosedForm);
  }
  return names;
}

/// The iterations of the stress plan the "stress" scenario runs.
constexpr int kStressIterations = 200;

/// One collective of the stress plan.
struct StressCollective {
  std::string kind;  // "all_reduce" (sum), "broadcast" or "all_gather"
  at::ScalarType dtype;
  int64_t numel;
  int root;          // of a broadcast
  std::string name;  // "stress I.K <kind> <dtype> x<numel>"
};

/// The stress plan: `iterations` rounds of 1 to 4 randomly sized
/// collectives, the same sequence on every rank (a fixed seed).
inline std::vector<std::vector<StressCollective>> stress_plan(int iterations, int world) {
  const std::vector<at::ScalarType> dtypes = collective_dtypes();
  std::mt19937 random(1234);
  std::uniform_int_distribution<int64_t> size_of(1, 300000);
  std::uniform_int_distribution<int> kind_of(0, 2);
  std::vector<std::vector<StressCollective>> plan(iterations);
  for (int i = 0; i < iterations; ++i) {
    const int batch = 1 + i % 4;  // Up to four collectives in flight.
    for (int k = 0; k < batch; ++k) {
      StressCollective c;
      c.numel = size_of(random);
      c.kind = std::vector<std::string>{"all_reduce", "broadcast", "all_gather"}[kind_of(random)];
      c.dtype = dtypes[(i + k) % dtypes.size()];
      c.root = (i + k) % world;
      c.name = "stress " + std::to_string(i) + "." + std::to_string(k) + " " +
               shm_check_name(c.kind, c.dtype, c.numel);
      plan[i].push_back(c);
    }
  }
  return plan;
}

/// The collectives of stress_plan(), several in flight at once, each checked
/// on completion. Prints each check by name; returns how many failed.
int stress_collectives(ProcessGroup& group, int iterations);

}  // namespace ddp::testing

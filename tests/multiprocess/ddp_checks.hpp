#pragma once

// DistributedDataParallel against single-process training, run on each rank
// of a real process group by ddp_test_worker. Each check is reported by name
// (tests/common/named_checks.hpp); each name is written once, below, for the
// checks and the parent tests' ddp_check_names() alike.

#include <c10/core/ScalarType.h>

#include <memory>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "base/dtype_name.hpp"
#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::testing {

/// Trains the tutorial ConvNet, an MLP and a model with a sometimes-unused
/// branch with DDP and compares every rank's parameters with one process
/// training on the concatenated batch; also no_sync, gradient_as_bucket_view,
/// the fp16/bf16 hooks and overlap. Prints each check by name; returns how
/// many failed.
int check_distributed_data_parallel(const std::shared_ptr<ProcessGroup>& group);

/// The names of check_distributed_data_parallel()'s checks.
namespace ddp_check {
inline const std::string kMlp = "MLP matches single-process training";
inline const std::string kBucketViewIdentical =
    "gradient_as_bucket_view on and off give identical parameters";
inline const std::string kBucketViewShared =
    "gradient_as_bucket_view gradients share the bucket's memory";
inline const std::string kTinyBuckets = "MLP with tiny buckets and delay_allreduce";
inline const std::string kNoSync = "no_sync over 2 micro-batches equals one step on both";
inline const std::string kNoSyncReducesOnce = "no_sync over 2 micro-batches reduces once per step";
inline const std::string kConvNet = "ConvNet parameters match single-process training";
/// The ConvNet's buffers are checked one way on rank 0, another on the others.
inline const std::string kConvNetBuffersOnRank0 =
    "ConvNet buffers on rank 0 follow rank 0's batches";
inline const std::string kConvNetBuffersElsewhere =
    "ConvNet buffers are rank 0's updated by this rank's last batch";
inline const std::string kUnusedBranch = "branch unused on some steps (find_unused_parameters)";
inline const std::string kOverlap = "reductions started during backward";
inline const std::string kOverlapDelayed = kOverlap + " (delay_allreduce)";

/// "<hook> hook stays within its precision", for a 16-bit compression hook
/// named `hook`.
inline std::string hook_precision(const std::string& hook) {
  return hook + " hook stays within its precision";
}
/// "<hook> hook result is exactly representable in <wire type>"
inline std::string hook_representable(const std::string& hook, at::ScalarType wire) {
  return hook + " hook result is exactly representable in " + ddp::base::detail::dtype_name(wire);
}
/// The compression hooks checked: each one's name() and wire type.
inline std::vector<std::pair<std::string, at::ScalarType>> compression_hooks() {
  return {{"fp16_compress", at::kHalf}, {"bf16_compress", at::kBFloat16}};
}
}  // namespace ddp_check

/// The names check_distributed_data_parallel() reports on `rank`, for the
/// parent test.
inline std::set<std::string> ddp_check_names(int rank) {
  using namespace ddp_check;  // NOLINT(google-build-using-namespace)
  std::set<std::string> names{kMlp,     kBucketViewIdentical, kBucketViewShared, kTinyBuckets,
                              kNoSync,  kNoSyncReducesOnce,   kConvNet,          kUnusedBranch,
                              kOverlap, kOverlapDelayed};
  names.insert(rank == 0 ? kConvNetBuffersOnRank0 : kConvNetBuffersElsewhere);
  for (const auto& [hook, wire] : compression_hooks()) {
    names.insert(hook_precision(hook));
    names.insert(hook_representable(hook, wire));
  }
  return names;
}

/// Wraps a model whose hidden width depends on the rank: must throw.
void wrap_mismatched_model(const std::shared_ptr<ProcessGroup>& group);

/// Trains a model with a branch no rank uses, without find_unused_parameters:
/// must throw naming the branch's parameters.
void train_with_unused_parameter(const std::shared_ptr<ProcessGroup>& group);

}  // namespace ddp::testing

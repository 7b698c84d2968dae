#pragma once

// DistributedDataParallel against single-process training, run on each rank
// of a real process group by ddp_test_worker. Each check is reported by name
// (tests/common/named_checks.hpp); the parent tests expect ddpCheckNames().

#include <memory>
#include <set>
#include <string>

#include "ddp/process_group.hpp"

namespace ddp::testing {

/// Trains the tutorial ConvNet, an MLP and a model with a sometimes-unused
/// branch with DDP and compares every rank's parameters with one process
/// training on the concatenated batch; also no_sync, gradient_as_bucket_view,
/// the fp16/bf16 hooks and overlap. Prints each check by name; returns how
/// many failed.
int checkDistributedDataParallel(const std::shared_ptr<ProcessGroup>& group);

/// The names checkDistributedDataParallel() reports on `rank` (the ConvNet's
/// buffers are checked one way on rank 0, another on the others), for the
/// parent test.
inline std::set<std::string> ddpCheckNames(int rank) {
  std::set<std::string> names{"MLP matches single-process training",
                              "gradient_as_bucket_view on and off give identical parameters",
                              "gradient_as_bucket_view gradients share the bucket's memory",
                              "MLP with tiny buckets and delay_allreduce",
                              "no_sync over 2 micro-batches equals one step on both",
                              "no_sync over 2 micro-batches reduces once per step",
                              "ConvNet parameters match single-process training",
                              "branch unused on some steps (find_unused_parameters)",
                              "fp16_compress hook stays within its precision",
                              "fp16_compress hook result is exactly representable in float16",
                              "bf16_compress hook stays within its precision",
                              "bf16_compress hook result is exactly representable in bfloat16",
                              "reductions started during backward",
                              "reductions started during backward (delay_allreduce)"};
  names.insert(rank == 0 ? "ConvNet buffers on rank 0 follow rank 0's batches"
                         : "ConvNet buffers are rank 0's updated by this rank's last batch");
  return names;
}

/// Wraps a model whose hidden width depends on the rank: must throw.
void wrapMismatchedModel(const std::shared_ptr<ProcessGroup>& group);

/// Trains a model with a branch no rank uses, without find_unused_parameters:
/// must throw naming the branch's parameters.
void trainWithUnusedParameter(const std::shared_ptr<ProcessGroup>& group);

}  // namespace ddp::testing

#pragma once

// DistributedDataParallel against single-process training, run on each rank
// of a real process group by ddp_test_worker.

#include <memory>

#include "ddp/process_group.hpp"
#include "multiprocess/worker_checks.hpp"

namespace ddp::testing {

/// Trains the tutorial ConvNet, an MLP and a model with a sometimes-unused
/// branch with DDP and compares every rank's parameters with one process
/// training on the concatenated batch; also no_sync, gradient_as_bucket_view,
/// the fp16/bf16 hooks and overlap.
CheckReport checkDistributedDataParallel(const std::shared_ptr<ProcessGroup>& group);

/// Wraps a model whose hidden width depends on the rank: must throw.
void wrapMismatchedModel(const std::shared_ptr<ProcessGroup>& group);

/// Trains a model with a branch no rank uses, without find_unused_parameters:
/// must throw naming the branch's parameters.
void trainWithUnusedParameter(const std::shared_ptr<ProcessGroup>& group);

}  // namespace ddp::testing

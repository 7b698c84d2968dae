#pragma once

// SyncBatchNorm against one-process BatchNorm on the concatenated batch,
// run on each rank of a real process group by sync_batch_norm_test_worker.
// Each check is reported by name (tests/common/named_checks.hpp); the parent
// test (sync_batch_norm_test.cpp) lists the names it expects.

#include <memory>

#include "ddp/process_group.hpp"

namespace ddp::testing {

/// Every input rank (2-5), equal and unequal batch sizes, momentum and
/// cumulative average, without affine or running statistics: outputs,
/// input gradients, weight and bias gradients (summed over ranks), running
/// statistics, eval mode without communication; one sample per rank; a
/// trained ConvNet converted, and trained under DDP. Returns how many checks
/// failed.
int checkSyncBatchNorm(const std::shared_ptr<ProcessGroup>& group);

}  // namespace ddp::testing

#pragma once

// The GPU checks, run on each rank of a real process group by
// gpu_test_worker; each reports named checks (tests/common/named_checks.hpp)
// whose expected names gpu_test.cpp lists.

#include <memory>
#include <string>
#include <vector>

#include "common/named_checks.hpp"
#include "ddp/process_group.hpp"

namespace ddp::testing {

/// The dtypes every collective is checked with.
std::vector<c10::ScalarType> gpuCollectiveDtypes();

/// The reductions every all-reduce is checked with, with their names.
std::vector<std::pair<ReduceOp, std::string>> gpuReduceOps();

/// "float32", "bfloat16", ...
std::string dtypeLabel(c10::ScalarType dtype);

/// Every collective on CUDA tensors against its closed form: all-reduce with
/// every op, broadcast from the last rank, all-gather, reduce-scatter, for
/// every dtype; a barrier and an asynchronous all-reduce. Results must stay
/// on the tensor's GPU.
void checkCudaCollectives(ProcessGroup& group, NamedChecks& checks);

/// DistributedDataParallel on CUDA against one process on the concatenated
/// batch: an MLP and LeNet-5 (SGD with momentum, 4 steps), the MLP again
/// with gradient_as_bucket_view, gradients accumulated under no_sync; the
/// replicas bit-identical across ranks.
void checkCudaDdp(const std::shared_ptr<ProcessGroup>& group, NamedChecks& checks);

/// Mixed precision on CUDA under DDP for float16 and bfloat16: O1 (autocast
/// really runs in 16 bits; training close to float32), O2 (16-bit model,
/// float32 masters; close to float32) and the GradScaler (an inf injected on
/// the last rank skips the step on every rank and halves the scale).
void checkCudaAmp(const std::shared_ptr<ProcessGroup>& group, NamedChecks& checks);

/// SyncBatchNorm on CUDA against BatchNorm on the whole batch (uneven batch
/// sizes per rank; output, gradients, running statistics), and the ConvNet
/// with SyncBatchNorm under DDP against one process.
void checkCudaSyncBatchNorm(const std::shared_ptr<ProcessGroup>& group, NamedChecks& checks);

}  // namespace ddp::testing

#pragma once

// The GPU checks, run on each rank of a real process group by
// gpu_test_worker; each reports named checks (tests/common/named_checks.hpp)
// whose expected names gpu_test.cpp lists.

#include <memory>
#include <string>
#include <vector>

#include "common/named_checks.hpp"
#include "ddp/comm/reduce_op.hpp"

namespace ddp::comm {
class ProcessGroup;
}  // namespace ddp::comm

namespace ddp {
using comm::ProcessGroup;  // Note [One namespace per layer] in ddp/ddp.hpp
}  // namespace ddp

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

/// DDP steps on CUDA that never make the host wait for the GPU (Note [Two
/// ways to wait for the GPU] in host_sync_checks.cpp), at world size 1 on
/// NCCL with the single-process shortcut off (so every all-reduce runs) and
/// on: default options, gradient_as_bucket_view, static_graph, no_sync, the
/// fp16 and bf16 hooks, ZeroRedundancyOptimizer stages 1 and 2; and at most
/// one synchronizing call per step with find_unused_parameters and with the
/// GradScaler (Note [Inherent synchronizations]).
void checkHostNeverWaits(const std::shared_ptr<ProcessGroup>& group, NamedChecks& checks);

/// The names of the checks checkHostNeverWaits makes.
std::vector<std::string> hostNeverWaitsChecks();

/// CapturedStep at world size 1 on NCCL: ConvNet and ResNet-18, with the
/// single-process shortcut (nothing to reduce) and without (the NCCL
/// all-reduces in the graph): 20 replayed steps against 20 eager ones, to
/// 1e-6; a GradScaler inside the capture refused with a named error.
void checkCapturedStep(const std::shared_ptr<ProcessGroup>& group, NamedChecks& checks);

/// The names of the checks checkCapturedStep makes.
std::vector<std::string> capturedStepChecks();

}  // namespace ddp::testing

#pragma once

// The GPU checks, run on each rank of a real process group by
// gpu_test_worker; each reports named checks (tests/common/named_checks.hpp)
// whose expected names gpu_test.cpp lists.

#include <c10/core/Device.h>

#include <memory>
#include <string>
#include <vector>

#include "common/named_checks.hpp"
#include "ddp/comm/process_group_fwd.hpp"
#include "ddp/comm/reduce_op.hpp"

namespace ddp::testing {

/// The device every GPU check runs on.
inline const c10::Device kGpu(c10::kCUDA, 0);

/// The dtypes every collective is checked with.
std::vector<c10::ScalarType> gpu_collective_dtypes();

/// The reductions every all-reduce is checked with, with their names.
std::vector<std::pair<ReduceOp, std::string>> gpu_reduce_ops();

/// "float32", "bfloat16", ...
std::string dtype_label(c10::ScalarType dtype);

/// Training checks use exact float32: no TF32 in convolutions or matrix
/// products (cuDNN allows TF32 by default, which alone differs by 1e-3).
void exact_float32();

/// Every collective on CUDA tensors against its closed form: all-reduce with
/// every op, broadcast from the last rank, all-gather, reduce-scatter, for
/// every dtype; a barrier and an asynchronous all-reduce. Results must stay
/// on the tensor's GPU.
void check_cuda_collectives(ProcessGroup& group, NamedChecks& checks);

/// DistributedDataParallel on CUDA against one process on the concatenated
/// batch: an MLP and LeNet-5 (SGD with momentum, 4 steps), the MLP again
/// with gradient_as_bucket_view, gradients accumulated under no_sync; the
/// replicas bit-identical across ranks.
void check_cuda_ddp(const std::shared_ptr<ProcessGroup>& group, NamedChecks& checks);

/// Mixed precision on CUDA under DDP for float16 and bfloat16: O1 (autocast
/// really runs in 16 bits; training close to float32), O2 (16-bit model,
/// float32 masters; close to float32) and the GradScaler (an inf injected on
/// the last rank skips the step on every rank and halves the scale).
void check_cuda_amp(const std::shared_ptr<ProcessGroup>& group, NamedChecks& checks);

/// SyncBatchNorm on CUDA against BatchNorm on the whole batch (uneven batch
/// sizes per rank; output, gradients, running statistics), and the ConvNet
/// with SyncBatchNorm under DDP against one process.
void check_cuda_sync_batch_norm(const std::shared_ptr<ProcessGroup>& group, NamedChecks& checks);

/// DDP steps on CUDA that never make the host wait for the GPU (Note [Two
/// ways to wait for the GPU] in host_sync_checks.cpp), at world size 1 on
/// NCCL with the single-process shortcut off (so every all-reduce runs) and
/// on: default options, gradient_as_bucket_view, static_graph, no_sync, the
/// fp16 and bf16 hooks, ZeroRedundancyOptimizer stages 1 and 2; and at most
/// one synchronizing call per step with find_unused_parameters and with the
/// GradScaler (Note [Inherent synchronizations]).
void check_host_never_waits(const std::shared_ptr<ProcessGroup>& group, NamedChecks& checks);

/// The names of the checks check_host_never_waits makes.
std::vector<std::string> host_never_waits_checks();

/// CapturedStep at world size 1 on NCCL: ConvNet and ResNet-18, with the
/// single-process shortcut (nothing to reduce) and without (the NCCL
/// all-reduces in the graph): 20 replayed steps against 20 eager ones, to
/// 1e-6; a GradScaler inside the capture refused with a named error.
void check_captured_step(const std::shared_ptr<ProcessGroup>& group, NamedChecks& checks);

/// The names of the checks check_captured_step makes.
std::vector<std::string> captured_step_checks();

}  // namespace ddp::testing

#pragma once

// FullyShardedDataParallel against one process on the concatenated batch,
// run on each rank of a real process group by ddp_test_worker; each check
// reported by name (tests/common/named_checks.hpp).

#include <c10/core/Device.h>

#include <memory>
#include <set>
#include <string>

#include "ddp/comm/process_group_fwd.hpp"
#include "ddp/parallel/fully_sharded_data_parallel.hpp"

namespace ddp::testing {

/// Runs every check below on `group`, the models and batches on `device`
/// (the reference too: one process on the same device); returns how many
/// failed. tests/gpu runs them on CUDA.
int check_fully_sharded(const std::shared_ptr<ProcessGroup>& group, c10::Device device = c10::kCPU);

/// "" when each unit's shard holds ceil(numel / N) elements and the ranks'
/// pieces hold each parameter's elements once, else what differs (a
/// collective: every rank calls it; fsdp_shard_holdings.cpp).
std::string wrong_shard_holdings(FullyShardedDataParallelImpl& model, ProcessGroup& group,
                                 c10::Device device);

/// The names of check_fully_sharded()'s checks.
namespace fsdp_check {
inline const std::string kSgd = "Sequential MLP with SGD and momentum matches one process";
inline const std::string kAdamW = "Sequential MLP with AdamW matches one process";
inline const std::string kFusedAdamW =
    "ddp::optim::AdamW over the shards' pieces matches LibTorch's AdamW bit for bit";
inline const std::string kKeepGathered =
    "reshard_after_forward off matches reshard_after_forward on bit for bit";
inline const std::string kNoPrefetch = "prefetch 0 matches prefetch 1 bit for bit";
inline const std::string kOverlapReduction =
    "overlap_reduction matches the default bit for bit, its peak of full parameters and "
    "gradients within the two largest units' parameters and gradients";
inline const std::string kCachedBuffers =
    "freed host buffers are kept for the next step, kept and in use within the most in use "
    "at once, freed by empty_cache(), none with cache_buffers(false), which matches bit for bit";
inline const std::string kBuffersLetGo =
    "the host buffers in use at once exceed the full parameters and gradients at their peak by "
    "at most one reduced shard: the backend lets go of a reduce-scatter's input and output "
    "before wait() returns, so a backward never takes a fourth unit-sized buffer";
inline const std::string kReductionOverlaps =
    "a unit's reduce-scatter is issued before the backward of the unit before it starts and "
    "waited for after (one full gradient alive)";
inline const std::string kWholeModel = "a custom module as one unit matches one process";
inline const std::string kFrozen = "a frozen first layer stays as it was and the rest matches";
inline const std::string kShardSizes =
    "each unit's shard holds ceil(numel / world size) elements, and each parameter's pieces on "
    "the ranks hold its elements once";
inline const std::string kPeak =
    "the peak of full parameters and gradients held is at most the two largest units' "
    "parameters and the largest unit's gradient (one full gradient alive at a time)";
inline const std::string kFreed = "the module's parameters hold no bytes between steps";
inline const std::string kTransformer =
    "a ModuleList of transformer blocks by sharded_call, tied embeddings in the root, matches one "
    "process";
inline const std::string kTiedOnce =
    "tied input and output embeddings are one piece, under one name, which full_parameters() "
    "names twice";
inline const std::string kConvNet =
    "a CNN in Sequential with SyncBatchNorm matches one process, running statistics included";
inline const std::string kNoSync =
    "no_sync over 2 micro-batches then a synchronized one equals one step on all 3";
inline const std::string kNoSyncReducesOnce =
    "no_sync backward passes reduce nothing and the synchronized one reduces each unit once";
inline const std::string kClip = "clip_grad_norm clips by the global norm and returns it";
inline const std::string kUnusedBranch =
    "a unit some ranks skip in some steps (find_unused_units) matches one process";
inline const std::string kMixedPrecision =
    "bf16 param_dtype stays within bf16's precision of one process in fp32, and is not fp32";
inline const std::string kMixedPrecisionDtypes =
    "bf16 param_dtype gathers in bf16, reduces in fp32, keeps fp32 shards and gradients";
inline const std::string kBadParamDtype = "an integer param_dtype is a ConfigError naming it";
inline const std::string kUnitMismatch = "a unit that differs between ranks is named on every rank";
inline const std::string kCollectiveNames =
    "a step's all-gathers and reduce-scatters are named fsdp.gather <unit> and fsdp.reduce <unit>";
inline const std::string kScaler =
    "a GradScaler over the group skips on every rank the step whose inf is in one rank's shard, "
    "halves the scale everywhere, and the other steps match one process";
}  // namespace fsdp_check

/// The names check_fully_sharded() reports.
inline std::set<std::string> fsdp_check_names() {
  using namespace fsdp_check;  // NOLINT(google-build-using-namespace)
  return {kSgd,
          kAdamW,
          kFusedAdamW,
          kKeepGathered,
          kNoPrefetch,
          kOverlapReduction,
          kCachedBuffers,
          kBuffersLetGo,
          kReductionOverlaps,
          kWholeModel,
          kFrozen,
          kShardSizes,
          kPeak,
          kFreed,
          kTransformer,
          kTiedOnce,
          kConvNet,
          kNoSync,
          kNoSyncReducesOnce,
          kClip,
          kUnusedBranch,
          kMixedPrecision,
          kMixedPrecisionDtypes,
          kBadParamDtype,
          kUnitMismatch,
          kCollectiveNames,
          kScaler};
}

}  // namespace ddp::testing

#pragma once

// ddp::nn::checkpoint inside DistributedDataParallel and around
// FullyShardedDataParallel units (issue #58, point 2): the same training
// with and without checkpointing, on each rank of a real process group, run
// by ddp_test_worker's "checkpoint" and "fsdp-checkpoint" scenarios.

#include <memory>
#include <set>
#include <string>

#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::testing {

namespace checkpoint_check {
inline const std::string kDdpBitForBit =
    "DDP around blocks run through ddp::nn::checkpoint, dropout included, holds after 3 SGD steps "
    "the parameters of the same DDP without checkpointing, bit for bit, and the same losses";
inline const std::string kDdpNoSync =
    "with checkpointed blocks and two micro-batches a step, the first under DDP's no_sync, the "
    "parameters after 3 steps equal the same without checkpointing, bit for bit";
}  // namespace checkpoint_check

inline std::set<std::string> checkpoint_check_names() {
  return {checkpoint_check::kDdpBitForBit, checkpoint_check::kDdpNoSync};
}

/// Runs the checks above on `group`; returns how many failed.
int check_checkpoint(const std::shared_ptr<ProcessGroup>& group);

// ddp::nn::checkpoint around FullyShardedDataParallel units (Note
// [Checkpointed units]): fsdp_checkpoint_checks.cpp, the worker's
// "fsdp-checkpoint" scenario.
namespace fsdp_checkpoint_check {
inline const std::string kBitForBit =
    "FSDP units (LayerNorm, BatchNorm1d, dropout) run through ddp::nn::checkpoint hold after 3 "
    "SGD steps the parameters, BatchNorm statistics and losses of the same FSDP without "
    "checkpointing, bit for bit, and the same peak of gathered bytes, less at most a unit's "
    "padding (a checkpointed unit's gradients wait for its reduction unpadded)";
inline const std::string kNoPrefetchNoSync =
    "with prefetch 0, reshard_after_forward false and a no_sync micro-batch, checkpointed units "
    "train bit for bit as without checkpointing";
inline const std::string kSkippedUnit =
    "with find_unused_units and a checkpointed unit some ranks skip on some steps, training "
    "equals the same without checkpointing, bit for bit";
inline const std::string kBf16 =
    "under param_dtype bf16, checkpointed units train bit for bit as without checkpointing";
inline const std::string kGradientPenalty =
    "a gradient penalty (autograd::grad with create_graph through checkpointed units) trains as "
    "without checkpointing, to 1e-6";
inline const std::string kWholeForwardRefused =
    "a whole FullyShardedDataParallel forward inside ddp::nn::checkpoint is refused by a "
    "ConfigError that says to checkpoint its units";
}  // namespace fsdp_checkpoint_check

inline std::set<std::string> fsdp_checkpoint_check_names() {
  using namespace fsdp_checkpoint_check;
  return {kBitForBit, kNoPrefetchNoSync, kSkippedUnit,
          kBf16,      kGradientPenalty,  kWholeForwardRefused};
}

/// Runs the FSDP checks above on `group`; returns how many failed.
int check_fsdp_checkpoint(const std::shared_ptr<ProcessGroup>& group);

}  // namespace ddp::testing

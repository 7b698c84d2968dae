#pragma once

// ddp::nn::checkpoint inside DistributedDataParallel (issue #58, point 2):
// the same training with and without checkpointing, on each rank of a real
// process group, run by ddp_test_worker's "checkpoint" scenario.

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

}  // namespace ddp::testing

#pragma once

// Internal: a sharded optimizer's state in full, for the consolidated
// export (ddp/snapshot/consolidated_export.hpp): what
// FSDP.full_optim_state_dict() gives in PyTorch.

#include <ATen/core/Tensor.h>
#include <nlohmann/json.hpp>

#include <functional>
#include <string>

#include "ddp/parallel/sharded_state.hpp"

namespace ddp::snapshot::detail {

/// Each optimizer state tensor of `sharded` in full, one parameter and
/// field at a time (every rank adds its piece; Note [A shard's pieces]), as
/// the snapshot record `optim/g<G>/p<I>/<field>` (Note [Optimizer state by
/// position]) passed to `add` on rank 0, where it may be written at once;
/// returns the optimizer's description (on every rank). Only one
/// parameter's state is ever whole. A collective over `sharded`'s group;
/// every rank's optimizer must hold the same parameters in the same groups
/// (FullyShardedState's does).
nlohmann::json gather_full_optimizer(
    const parallel::ShardedState& sharded,
    const std::function<void(const std::string& record, const at::Tensor& value)>& add);

}  // namespace ddp::snapshot::detail

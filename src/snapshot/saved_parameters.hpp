#pragma once

// Internal: which parameter of a saved sharded state (its record's
// "numels", and "names" and "shapes" where it has them) each parameter of
// a parallel::ShardedState is, for resuming it.

#include <nlohmann/json.hpp>

#include <cstddef>
#include <functional>
#include <string>
#include <vector>

#include "ddp/parallel/sharded_state.hpp"

namespace ddp::snapshot::detail {

/// For each of `sharded`'s parameters, the index of the saved one it is:
/// by name where both know names (FullyShardedState), each shape checked
/// and every saved name used; else by position, each size checked.
/// Calls `fail` (which throws) with what differs.
std::vector<size_t> match_saved_parameters(const nlohmann::json& record,
                                           const parallel::ShardedState& sharded,
                                           const std::function<void(const std::string&)>& fail);

}  // namespace ddp::snapshot::detail

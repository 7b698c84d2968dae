#pragma once

// Internal: how a commit (or a ZeRO shard of one) travels between ranks: its
// scalars record and its tensors' layout, [[name, dtype, sizes], ...], go
// first as JSON; the receivers allocate the tensors from the layout, and
// the bytes follow (State::sync, shard_buddies.cpp).

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <string>
#include <vector>

#include "ddp/snapshot/snapshot_manager.hpp"

namespace ddp::elastic::detail {

/// [[name, dtype, sizes], ...] of `commit`'s tensors, in its order.
inline nlohmann::json tensor_layout(const snapshot::SnapshotFile& commit) {
  nlohmann::json tensors = nlohmann::json::array();
  for (const auto& [name, tensor] : commit.tensors) {
    tensors.push_back({name, static_cast<int>(tensor.scalar_type()), tensor.sizes().vec()});
  }
  return tensors;
}

/// A commit with `scalars` and uninitialized tensors laid out as `layout`
/// (tensor_layout()) says.
inline snapshot::SnapshotFile allocate_from_layout(const std::string& scalars,
                                                   const nlohmann::json& layout) {
  snapshot::SnapshotFile commit;
  commit.scalars_json = scalars;
  for (const auto& entry : layout) {
    const auto dtype = static_cast<at::ScalarType>(entry.at(1).get<int>());
    commit.tensors.emplace(entry.at(0).get<std::string>(),
                           at::empty(entry.at(2).get<std::vector<int64_t>>(), dtype));
  }
  return commit;
}

}  // namespace ddp::elastic::detail

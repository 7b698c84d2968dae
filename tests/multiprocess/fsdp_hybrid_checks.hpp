#pragma once

// FullyShardedDataParallel with hybrid sharding (a DeviceMesh of a row per
// node) against one process, run on each rank by ddp_test_worker
// (fsdp_hybrid_checks.cpp); each check reported by name.

#include <memory>
#include <set>
#include <string>

#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::testing {

/// Hybrid sharding on a DeviceMesh of a row per node (the launcher's
/// nodes) against one process; returns how many failed. Prints
/// "mesh=<describe()>".
int check_fully_sharded_hybrid(const std::shared_ptr<ProcessGroup>& group);

/// The names of check_fully_sharded_hybrid()'s checks.
namespace fsdp_check {
inline const std::string kMeshGroups =
    "DeviceMesh::by_node: a row per node on shared memory, a column across nodes on Gloo, their "
    "all-reduces equal to the closed forms";
inline const std::string kHybridAdamW =
    "hybrid sharding (a row per node) with AdamW matches one process";
inline const std::string kHybridShards =
    "hybrid sharding: each unit's shard holds ceil(numel / row size) elements, the row's pieces "
    "hold each element once, nothing held between steps";
inline const std::string kHybridBuiltSharded =
    "hybrid sharding of a model built under ShardedConstruction(mesh->shard_group()), each row "
    "building its shards, matches one process";
inline const std::string kHybridReplicationOverlaps =
    "hybrid sharding: each unit's all-reduce across the rows is still on its way when the next "
    "unit's reduce-scatter starts (none with one row)";
inline const std::string kHybridClip =
    "hybrid sharding: clip_grad_norm returns the whole gradient's norm (one process's)";
inline const std::string kNodeReshardAdamW =
    "hpZ (reshard_after_forward_mesh a row per node) with AdamW matches one process";
inline const std::string kNodeReshardGathers =
    "hpZ: the forward gathers across the world, the backward only within the node, from slices "
    "kept since the forward (their bytes counted)";
inline const std::string kNodeReshardCheckpointed =
    "hpZ with each unit run through ddp::nn::checkpoint matches one process, each recompute in "
    "backward gathering only within the node";
inline const std::string kHybridRefusals =
    "a mesh of the wrong shape, a mesh made from another group than the model's, a model built "
    "under a ShardedConstruction of the world, and hpZ beside device_mesh or without "
    "reshard_after_forward are ConfigErrors naming why";
}  // namespace fsdp_check

inline std::set<std::string> fsdp_hybrid_check_names() {
  using namespace fsdp_check;  // NOLINT(google-build-using-namespace)
  return {kMeshGroups,         kHybridAdamW,        kHybridShards,
          kHybridBuiltSharded, kHybridClip,         kHybridReplicationOverlaps,
          kNodeReshardAdamW,   kNodeReshardGathers, kNodeReshardCheckpointed,
          kHybridRefusals};
}

}  // namespace ddp::testing

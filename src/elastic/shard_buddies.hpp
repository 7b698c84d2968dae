#pragma once

// Internal: the sharded part of an elastic::State commit (Note [Sharded
// state in memory] in ddp/elastic/state.hpp): each rank keeps its own shard
// of a parallel::ShardedState (ZeRO's optimizer state, or FSDP's parameters
// and optimizer state) and a copy of its buddy's, rank (r - 1) mod n's, so
// that a lost rank's shard survives on rank r + 1. Shards are kept as a
// snapshot's shard files hold them (snapshot/sharded_state.hpp), and cut
// into a new partition the same way.

#include <nlohmann/json.hpp>

#include <cstdint>
#include <map>

#include "ddp/comm/process_group_fwd.hpp"
#include "ddp/parallel/sharded_state.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"

namespace ddp::elastic::detail {

/// The sharded part of a commit, as one rank holds it.
struct ShardCommit {
  /// The commit the shards belong to (State::commits() when it was made).
  int64_t commit = 0;
  /// Every old rank's pieces and each flattened parameter's elements, as a
  /// snapshot's record of the sharded state.
  nlohmann::json record;
  /// Shards by the rank that owned them when committed (CPU tensors and
  /// the {"optimizer", "rank", "pieces"} record of a shard file).
  std::map<int, snapshot::SnapshotFile> shards;
};

/// This rank's shard of `sharded` and a copy of rank (r - 1) mod n's,
/// tagged `commit`. A collective over sharded.group(): one all-gather of
/// every rank's shard bytes. \throws SnapshotError for an optimizer
/// snapshots do not support.
ShardCommit commit_shards(const parallel::ShardedState& sharded, int64_t commit);

/// The shards rank r of `group` holds after a sync to commit `commit`,
/// whose record (the sender's) is `record`: at the record's world size its
/// own, r, and its buddy's, (r - 1) mod n; at another world size every old
/// shard (restore_shards() cuts the new partition out of them). Each shard
/// a rank lacks is broadcast by the lowest rank holding it. `mine` is what
/// this rank holds (null: nothing, as a replacement). A collective.
/// \throws SnapshotError, on every rank, naming the first shard that no
///   rank holds (its owner and its buddy were both lost).
ShardCommit sync_shards(ProcessGroup& group, const ShardCommit* mine, const nlohmann::json& record,
                        int64_t commit);

/// Puts this rank's part of `shards` into `sharded` (its local optimizer,
/// and its values where it holds them), cut out of the shards that overlap
/// its pieces (exactly its own shard at the same world size).
/// \throws SnapshotError when it does not fit `sharded` or a needed shard
///   is not held here.
void restore_shards(const ShardCommit& shards, parallel::ShardedState& sharded);

}  // namespace ddp::elastic::detail

#pragma once

/// \file state.hpp
/// Training state committed in memory, as Horovod Elastic's
/// `State.commit()`/`restore()`/`sync()`: what lets the survivors of a
/// failure keep their processes and hand their state to a replacement
/// instead of everybody reading a snapshot from disk.
///
/// Note [What a commit holds]
/// A commit is what a snapshot file would hold for the same
/// snapshot::TrainingState (model parameters and buffers, optimizer and
/// scheduler state, gradient scaler, epoch, step, samples consumed,
/// counters, extra tensors, metadata, this process's generators), copied
/// into CPU memory by snapshot::capture_training_state(). It costs one copy
/// of the model and optimizer state per commit and no I/O, so committing
/// every few steps is cheap next to a step; what a failure costs is the
/// steps since the last commit, which every rank runs again.
///
/// Note [Sharded state in memory]
/// With TrainingState::zero_optimizer (or fully_sharded: FSDP's parameters
/// and optimizer state), each rank holds a shard of the state that no other
/// rank has, so commit() becomes a collective over the shards' group: every rank keeps its own
/// shard and a copy of its buddy's, rank (r - 1) mod n's, so each shard lives on its owner and on
/// the next rank (as a snapshot's shard file holds it, without the file). It
/// costs twice the shard's memory and, per commit, one all-gather of every
/// rank's shard: without point-to-point messages in ProcessGroup each rank
/// receives the n - 1 other shards, keeps its buddy's and drops the rest
/// (n - 1 shards of traffic and, briefly, about 2n shards of memory per rank;
/// point-to-point would make both one). sync() then puts the shards back
/// where they belong: at the same world size each rank again holds its own
/// and its buddy's, the ones a replacement lacks broadcast by a rank that
/// kept them (two shards for one lost rank); at another world size every rank
/// receives every old shard. The sync cannot build the training function's
/// optimizer, which needs the generation's group, so the shard goes in when
/// restore() is called after the function has made the optimizer and pointed
/// zero_optimizer at it; restore() cuts it out of the old shards that overlap
/// its pieces, so a new partition works too. Losing two neighbouring ranks, r
/// and r + 1, loses shard r: sync() throws SnapshotError naming it on every
/// rank, and such a job must resume from snapshot files. A rank lost during a
/// commit itself may leave shards of two commits; sync() then names the shard
/// of the newest one it lacks.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>

#include "ddp/comm/process_group_fwd.hpp"
#include "ddp/snapshot/errors.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"

namespace ddp::elastic {
namespace detail {
struct ShardCommit;
}  // namespace detail

/// A training state and its last commit (Note [What a commit holds]).
class State {
 public:
  /// Watches `training` (which must outlive the State); nothing is committed
  /// yet.
  explicit State(snapshot::TrainingState& training);

  /// Copies the training state into memory, replacing the previous commit.
  /// Call it at the same point of the loop on every rank, after a step's
  /// collectives have completed (a commit of a half-done step is useless).
  /// With a zero_optimizer or fully_sharded it is a collective over its group,
  /// which keeps each shard on two ranks (Note [Sharded state in memory]);
  /// otherwise it is local.
  /// \throws SnapshotError for an unsupported optimizer, or both an
  ///   optimizer and a sharded part (zero_optimizer, fully_sharded).
  void commit();

  /// Puts the last commit back into the training state, exactly (the
  /// generators included). Does nothing before the first commit. A commit
  /// with ZeRO shards needs zero_optimizer to point at the current
  /// generation's optimizer, which takes this rank's shard; call restore()
  /// once the training function has made it, when commits() > 0.
  /// \throws SnapshotError when the commit and the training state disagree
  ///   on ZeRO, or the shard does not fit the optimizer.
  void restore();

  /// Gives every rank of `group` the most advanced commit: the ranks share
  /// their commit counts, the lowest rank with the highest count broadcasts
  /// its commit, and every rank, the sender too, restores it, so the ranks
  /// continue from one state. Each rank's generators are then seeded from
  /// the sender's CPU generator state and the rank (as a snapshot resumed at
  /// another world size seeds them). A collective: every rank calls it.
  /// A commit with ZeRO shards also hands the shards on (Note [Sharded state
  /// in memory]); zero_optimizer is left alone (it may be the previous
  /// generation's, already gone) and takes its shard in restore().
  /// \returns the sender's rank, or nullopt when no rank has committed
  ///   (nothing changes then).
  /// \throws SnapshotError, on every rank, when a shard of the commit was
  ///   lost with both ranks that held it.
  std::optional<int> sync(ProcessGroup& group);

  /// Calls `observer` at the end of every commit(), once the commit is made
  /// (so at the same point of every rank's loop); an empty function removes
  /// it. What it throws leaves commit() with the commit kept. run() watches
  /// there for a job re-formed around a new node (Note [A node joins in
  /// memory] in ddp/elastic/run.hpp).
  void on_commit(std::function<void()> observer) { on_commit_ = std::move(observer); }

  /// Commits made here or received through sync(): equal on every rank
  /// after a sync.
  int64_t commits() const noexcept { return commits_; }

  /// The training state this State commits.
  snapshot::TrainingState& training() noexcept { return training_; }

 private:
  snapshot::TrainingState& training_;
  std::optional<snapshot::SnapshotFile> committed_;    // without the sharded optimizer
  std::shared_ptr<const detail::ShardCommit> shards_;  // with a sharded part
  int64_t commits_ = 0;
  std::function<void()> on_commit_;
};

}  // namespace ddp::elastic

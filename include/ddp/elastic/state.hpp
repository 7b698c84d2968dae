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
/// A ZeroRedundancyOptimizer cannot be committed: each rank holds a shard
/// that no other rank has, so a lost rank's part of the state is gone.

#include <cstdint>
#include <optional>

#include "ddp/snapshot/snapshot_manager.hpp"
#include "ddp/snapshot/errors.hpp"
#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::elastic {

/// A training state and its last commit (Note [What a commit holds]).
class State {
 public:
  /// Watches `training` (which must outlive the State); nothing is committed
  /// yet.
  explicit State(snapshot::TrainingState& training);

  /// Copies the training state into memory, replacing the previous commit.
  /// Call it at the same point of the loop on every rank, after a step's
  /// collectives have completed (a commit of a half-done step is useless).
  /// \throws SnapshotError for a zero_optimizer or an unsupported optimizer.
  void commit();

  /// Puts the last commit back into the training state, exactly (the
  /// generators included). Does nothing before the first commit.
  void restore();

  /// Gives every rank of `group` the most advanced commit: the ranks share
  /// their commit counts, the lowest rank with the highest count broadcasts
  /// its commit, and every rank, the sender too, restores it, so the ranks
  /// continue from one state. Each rank's generators are then seeded from
  /// the sender's CPU generator state and the rank (as a snapshot resumed at
  /// another world size seeds them). A collective: every rank calls it.
  /// \returns the sender's rank, or nullopt when no rank has committed
  ///   (nothing changes then).
  std::optional<int> sync(ProcessGroup& group);

  /// Commits made here or received through sync(): equal on every rank
  /// after a sync.
  int64_t commits() const noexcept { return commits_; }

  /// The training state this State commits.
  snapshot::TrainingState& training() noexcept { return training_; }

 private:
  snapshot::TrainingState& training_;
  std::optional<snapshot::SnapshotFile> committed_;
  int64_t commits_ = 0;
};

}  // namespace ddp::elastic

#pragma once

/// \file distributed_sampler.hpp
/// Which samples each rank trains on, with PyTorch's DistributedSampler
/// semantics, resumable in the middle of an epoch.

#include <torch/arg.h>

#include <cstdint>
#include <vector>

namespace ddp::data {

/// Options of DistributedSampler.
struct DistributedSamplerOptions {
  /// Shuffle each epoch (by seed + epoch); false keeps dataset order.
  TORCH_ARG(bool, shuffle) = true;
  /// Seed shared by every rank; the order is the same on all of them.
  TORCH_ARG(uint64_t, seed) = 0;
  /// Drop the tail that does not divide evenly instead of padding it by
  /// repeating samples from the start.
  TORCH_ARG(bool, drop_last) = false;
};

/// Splits `dataset_size` indices into `num_replicas` disjoint shards of equal
/// length, one per rank (PyTorch's DistributedSampler):
/// - each epoch the indices are permuted with a generator seeded by
///   seed + epoch, identically on every rank;
/// - the permutation is padded by repeating its first indices (or truncated,
///   with drop_last) to a multiple of num_replicas;
/// - rank r takes every num_replicas-th index starting at r.
class DistributedSampler {
 public:
  /// \throws ddp::ConfigError for an empty dataset, num_replicas < 1, or a
  ///   rank outside [0, num_replicas).
  DistributedSampler(int64_t dataset_size, int num_replicas, int rank,
                     DistributedSamplerOptions options = {});

  /// Selects the epoch's order; call at the start of every epoch.
  void set_epoch(int64_t epoch);
  int64_t epoch() const { return epoch_; }

  /// Up to `batch_size` next indices of this rank's shard; empty at the end
  /// of the epoch.
  std::vector<int64_t> next(int64_t batch_size);

  /// Indices of this rank's shard already handed out in this epoch.
  int64_t position() const { return position_; }
  /// Continues an epoch where a snapshot of the same world size left it:
  /// set_epoch(epoch), then skip `position` indices.
  void restore(int64_t epoch, int64_t position);

  /// Samples of the epoch's order the whole job has been handed, every rank
  /// having taken position(): the epoch's start (0, or restore_global()'s)
  /// plus position() × num_replicas. Unlike position(), it means the same
  /// at any world size: save it in a snapshot (TrainingState::
  /// samples_in_epoch).
  int64_t global_position() const { return start_ + position_ * num_replicas_; }
  /// Continues an epoch that a job of any world size left at
  /// `global_position`. The epoch's order from that position on is shared
  /// out as set_epoch() shares a whole epoch: padded with the epoch's first
  /// samples (or truncated, with drop_last) to a multiple of num_replicas,
  /// rank r taking every num_replicas-th from r. So the samples seen before
  /// and after cover the data set once (padding aside), and at the same
  /// world size this equals restore(epoch, global_position / num_replicas).
  /// Epochs after it are whole again.
  /// \throws ddp::ConfigError for a negative position.
  void restore_global(int64_t epoch, int64_t global_position);

  /// This rank's shard of the current epoch, in order.
  const std::vector<int64_t>& indices() const { return shard_; }
  /// Length of each rank's shard this epoch (shorter in an epoch resumed by
  /// restore_global()).
  int64_t shard_size() const { return shard_size_; }

 private:
  int64_t dataset_size_;
  int num_replicas_;
  int rank_;
  DistributedSamplerOptions options_;
  int64_t shard_size_;
  // Lays out epoch `epoch` from sample `start` of its order on.
  void arrange(int64_t epoch, int64_t start);

  int64_t epoch_ = 0;
  int64_t start_ = 0;  // where in the epoch's order this shard begins
  int64_t position_ = 0;
  std::vector<int64_t> shard_;
};

}  // namespace ddp::data

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
  /// Continues an epoch where a snapshot left it: set_epoch(epoch), then
  /// skip `position` indices.
  void restore(int64_t epoch, int64_t position);

  /// This rank's shard of the current epoch, in order.
  const std::vector<int64_t>& indices() const { return shard_; }
  /// Length of each rank's shard.
  int64_t shard_size() const { return shard_size_; }

 private:
  int64_t dataset_size_;
  int num_replicas_;
  int rank_;
  DistributedSamplerOptions options_;
  int64_t shard_size_;
  int64_t epoch_ = 0;
  int64_t position_ = 0;
  std::vector<int64_t> shard_;
};

}  // namespace ddp::data

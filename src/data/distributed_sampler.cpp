#include "ddp/data/distributed_sampler.hpp"

#include <ATen/ATen.h>
#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <string>

#include "base/str.hpp"
#include "ddp/base/errors.hpp"

namespace ddp::data {

DistributedSampler::DistributedSampler(int64_t dataset_size, int num_replicas, int rank,
                                       DistributedSamplerOptions options)
    : dataset_size_(dataset_size), num_replicas_(num_replicas), rank_(rank), options_(options) {
  if (dataset_size < 1) {
    throw ConfigError(base::detail::str("DistributedSampler: the dataset is empty (size ",
                                        dataset_size, "); there is nothing to shard."));
  }
  if (num_replicas < 1 || rank < 0 || rank >= num_replicas) {
    throw ConfigError(
        base::detail::str("DistributedSampler: rank ", rank, " of ", num_replicas,
                          " replicas is impossible; pass group->rank() and group->size()."));
  }
  shard_size_ = options.drop_last() ? dataset_size / num_replicas
                                    : (dataset_size + num_replicas - 1) / num_replicas;
  if (shard_size_ == 0) {
    throw ConfigError(base::detail::str("DistributedSampler: with drop_last, ", dataset_size,
                                        " samples leave nothing for ", num_replicas,
                                        " replicas; use fewer ranks or drop_last(false)."));
  }
  set_epoch(0);
}

void DistributedSampler::set_epoch(int64_t epoch) { arrange(epoch, 0); }

void DistributedSampler::arrange(int64_t epoch, int64_t start) {
  epoch_ = epoch;
  start_ = std::min(start, dataset_size_);
  position_ = 0;
  std::vector<int64_t> order(dataset_size_);
  if (options_.shuffle()) {
    // A private generator: the order depends on seed + epoch only, never on
    // what else consumed the global random stream.
    at::Generator generator = at::detail::createCPUGenerator(options_.seed() + epoch);
    at::Tensor permutation = at::randperm(dataset_size_, generator, at::kLong);
    std::copy(permutation.data_ptr<int64_t>(), permutation.data_ptr<int64_t>() + dataset_size_,
              order.begin());
  } else {
    for (int64_t i = 0; i < dataset_size_; ++i) order[i] = i;
  }
  // What is left of the epoch, padded with its first samples (PyTorch's
  // padding) or truncated to a multiple of the replicas.
  const int64_t remaining = dataset_size_ - start_;
  shard_size_ = options_.drop_last() ? remaining / num_replicas_
                                     : (remaining + num_replicas_ - 1) / num_replicas_;
  const int64_t total = shard_size_ * num_replicas_;
  std::vector<int64_t> arranged(order.begin() + start_, order.end());
  for (int64_t i = 0; static_cast<int64_t>(arranged.size()) < total; ++i) {
    arranged.push_back(order[i % dataset_size_]);
  }
  shard_.clear();
  for (int64_t i = rank_; i < total; i += num_replicas_) shard_.push_back(arranged[i]);
}

std::vector<int64_t> DistributedSampler::next(int64_t batch_size) {
  const int64_t end = std::min<int64_t>(position_ + batch_size, shard_size_);
  std::vector<int64_t> batch(shard_.begin() + position_, shard_.begin() + end);
  position_ = end;
  return batch;
}

void DistributedSampler::restore_global(int64_t epoch, int64_t global_position) {
  if (global_position < 0) {
    throw ConfigError(
        base::detail::str("DistributedSampler: cannot resume at global position ", global_position,
                          "; it counts the samples of the epoch already handed out, from 0."));
  }
  arrange(epoch, global_position);
}

void DistributedSampler::restore(int64_t epoch, int64_t position) {
  set_epoch(epoch);
  if (position < 0 || position > shard_size_) {
    throw ConfigError(base::detail::str(
        "DistributedSampler: cannot resume at position ", position, " of a shard of ", shard_size_,
        "; the snapshot was taken with another dataset or world size."));
  }
  position_ = position;
}

}  // namespace ddp::data

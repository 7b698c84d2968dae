// Tests of DistributedSampler against PyTorch's semantics: disjoint shards
// that cover the dataset once per epoch (padded by repeating the start of
// the permutation, or truncated with drop_last), an order fixed by seed and
// epoch and the same on every rank, and resumption mid-epoch.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <set>
#include <vector>

#include "common/error_capture.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/data/distributed_sampler.hpp"

using ddp::data::DistributedSampler;
using ddp::data::DistributedSamplerOptions;
using ddp::testing::error_of;
using Indices = std::vector<int64_t>;

namespace {

// Every rank's shard of `epoch`, each from its own sampler (as on real ranks).
std::vector<Indices> shards(int64_t size, int replicas, int64_t epoch,
                            DistributedSamplerOptions options = {}) {
  std::vector<Indices> out;
  for (int rank = 0; rank < replicas; ++rank) {
    DistributedSampler sampler(size, replicas, rank, options);
    sampler.set_epoch(epoch);
    out.push_back(sampler.indices());
  }
  return out;
}

// The epoch's order as PyTorch defines it: rank r takes positions r, r+R, ...
Indices interleave(const std::vector<Indices>& per_rank) {
  Indices order;
  for (size_t i = 0; i < per_rank[0].size(); ++i)
    for (const auto& shard : per_rank) order.push_back(shard.at(i));
  return order;
}

Indices iota(int64_t n) {
  Indices out(n);
  for (int64_t i = 0; i < n; ++i) out[i] = i;
  return out;
}

}  // namespace

TEST(DataDistributedSampler, ShardsCoverTheDatasetExactlyOncePerEpoch) {
  for (int replicas : {1, 2, 3, 4, 5}) {
    for (int64_t size : {int64_t{60}, int64_t{120}, int64_t{replicas * 7}}) {
      for (int64_t epoch : {0, 1, 7}) {
        SCOPED_TRACE("size " + std::to_string(size) + ", replicas " + std::to_string(replicas) +
                     ", epoch " + std::to_string(epoch));
        const auto per_rank = shards(size, replicas, epoch);
        Indices all;
        for (const auto& shard : per_rank) {
          EXPECT_EQ(static_cast<int64_t>(shard.size()), size / replicas);
          all.insert(all.end(), shard.begin(), shard.end());
        }
        std::sort(all.begin(), all.end());
        EXPECT_EQ(all, iota(size));  // Disjoint, complete, no padding.
      }
    }
  }
}

TEST(DataDistributedSampler, UnevenSizesArePaddedFromTheStartOfThePermutation) {
  const int64_t size = 10;
  const int replicas = 4;  // 10 -> 12: two samples repeated.
  const auto per_rank = shards(size, replicas, 3);
  const Indices order = interleave(per_rank);
  ASSERT_EQ(order.size(), 12u);
  Indices first_ten(order.begin(), order.begin() + 10);
  std::sort(first_ten.begin(), first_ten.end());
  EXPECT_EQ(first_ten, iota(size));  // The permutation itself...
  EXPECT_EQ(order[10], order[0]);    // ...then its first indices again.
  EXPECT_EQ(order[11], order[1]);
}

TEST(DataDistributedSampler, DropLastTruncatesInsteadOfPadding) {
  const auto per_rank = shards(10, 4, 2, DistributedSamplerOptions().drop_last(true));
  std::set<int64_t> seen;
  for (const auto& shard : per_rank) {
    EXPECT_EQ(shard.size(), 2u);
    for (int64_t index : shard) EXPECT_TRUE(seen.insert(index).second) << index << " twice";
  }
  EXPECT_EQ(seen.size(), 8u);
  for (int64_t index : seen) EXPECT_TRUE(index >= 0 && index < 10);
}

TEST(DataDistributedSampler, OrderDiffersAcrossEpochsAndSeedsButNotAcrossCopies) {
  const Indices epoch0 = interleave(shards(1000, 2, 0));
  const Indices epoch1 = interleave(shards(1000, 2, 1));
  EXPECT_NE(epoch0, epoch1);
  for (int rank = 0; rank < 2; ++rank)
    EXPECT_NE(shards(1000, 2, 0)[rank], shards(1000, 2, 1)[rank]);
  EXPECT_EQ(epoch0, interleave(shards(1000, 2, 0)));  // Deterministic.
  EXPECT_NE(epoch0, interleave(shards(1000, 2, 0, DistributedSamplerOptions().seed(1))));
  // seed + epoch, as PyTorch: seed 1 epoch 0 is seed 0 epoch 1.
  EXPECT_EQ(interleave(shards(1000, 2, 0, DistributedSamplerOptions().seed(1))), epoch1);
  // The global random stream neither influences nor is consumed by it.
  torch::manual_seed(123);
  const double before = torch::rand({1}).item<double>();
  torch::manual_seed(123);
  EXPECT_EQ(interleave(shards(1000, 2, 0)), epoch0);
  EXPECT_EQ(torch::rand({1}).item<double>(), before);
  // One epoch's order is a permutation, not the identity.
  EXPECT_NE(epoch0, iota(1000));
  Indices sorted = epoch0;
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(sorted, iota(1000));
}

TEST(DataDistributedSampler, WithoutShuffleRanksTakeEveryNthIndex) {
  const auto per_rank = shards(9, 3, 5, DistributedSamplerOptions().shuffle(false));
  EXPECT_EQ(per_rank[0], (Indices{0, 3, 6}));
  EXPECT_EQ(per_rank[1], (Indices{1, 4, 7}));
  EXPECT_EQ(per_rank[2], (Indices{2, 5, 8}));
}

TEST(DataDistributedSampler, BatchesWalkTheShardAndEndEmpty) {
  DistributedSampler sampler(100, 3, 1);  // Shard of 34 (padded).
  sampler.set_epoch(4);
  Indices walked;
  std::vector<size_t> sizes;
  for (Indices batch; !(batch = sampler.next(8)).empty();) {
    sizes.push_back(batch.size());
    walked.insert(walked.end(), batch.begin(), batch.end());
  }
  EXPECT_EQ(sizes, (std::vector<size_t>{8, 8, 8, 8, 2}));
  EXPECT_EQ(walked, sampler.indices());
  EXPECT_EQ(sampler.position(), sampler.shard_size());
  sampler.set_epoch(5);  // A new epoch starts from the beginning.
  EXPECT_EQ(sampler.position(), 0);
  EXPECT_EQ(sampler.next(3).size(), 3u);
}

TEST(DataDistributedSampler, RestoreContinuesMidEpochExactly) {
  DistributedSampler straight(1000, 2, 1, DistributedSamplerOptions().seed(9));
  straight.set_epoch(3);
  straight.next(64);
  straight.next(64);
  const Indices expected = straight.next(64);

  DistributedSampler resumed(1000, 2, 1, DistributedSamplerOptions().seed(9));
  resumed.restore(3, 128);  // As a snapshot after two steps of 64 records it.
  EXPECT_EQ(resumed.epoch(), 3);
  EXPECT_EQ(resumed.position(), 128);
  EXPECT_EQ(resumed.next(64), expected);
  resumed.restore(3, resumed.shard_size());  // A snapshot at the epoch's end.
  EXPECT_TRUE(resumed.next(64).empty());
}

// A job of 2 ranks that consumed `steps` batches of `batch` in epoch 5,
// resumed at `world` ranks: what each side saw.
struct Resumed {
  std::multiset<int64_t> before, after;
  int64_t global_position = 0;
  std::vector<int64_t> shard_sizes;
};
Resumed resume_at(int world, int64_t size, int64_t steps, int64_t batch,
                  DistributedSamplerOptions options) {
  Resumed r;
  for (int rank = 0; rank < 2; ++rank) {
    DistributedSampler sampler(size, 2, rank, options);
    sampler.set_epoch(5);
    for (int64_t s = 0; s < steps; ++s) {
      for (int64_t i : sampler.next(batch)) r.before.insert(i);
    }
    r.global_position = sampler.global_position();  // the same on both ranks
  }
  for (int rank = 0; rank < world; ++rank) {
    DistributedSampler sampler(size, world, rank, options);
    sampler.restore_global(5, r.global_position);
    r.shard_sizes.push_back(sampler.shard_size());
    for (auto batch_indices = sampler.next(batch); !batch_indices.empty();
         batch_indices = sampler.next(batch)) {
      for (int64_t i : batch_indices) r.after.insert(i);
    }
  }
  return r;
}

TEST(DataDistributedSampler, GlobalPositionResumesTheEpochAtAnotherWorldSize) {
  const int64_t size = 103;  // prime: padding at every world size
  for (int world : {1, 2, 3}) {
    SCOPED_TRACE("resumed at " + std::to_string(world) + " ranks");
    const auto options = DistributedSamplerOptions().seed(4);
    const Resumed r = resume_at(world, size, /*steps=*/3, /*batch=*/7, options);
    EXPECT_EQ(r.global_position, 2 * 3 * 7);
    EXPECT_EQ(r.before.size(), 42u);
    // Every rank has the same number of samples left: ceil(61 / world).
    for (int64_t n : r.shard_sizes) EXPECT_EQ(n, (size - 42 + world - 1) / world);
    // Before and after cover the data set; the only repeats are the
    // padding, fewer than `world` samples from the epoch's start.
    std::set<int64_t> seen(r.before.begin(), r.before.end());
    seen.insert(r.after.begin(), r.after.end());
    const Indices all = iota(size);
    EXPECT_EQ(seen, std::set<int64_t>(all.begin(), all.end()));
    const int64_t padding = static_cast<int64_t>(r.after.size()) - (size - 42);
    EXPECT_GE(padding, 0);
    EXPECT_LT(padding, world);
    EXPECT_EQ(std::set<int64_t>(r.before.begin(), r.before.end()).size(), 42u);
    int64_t repeated = 0;
    for (int64_t i : r.after) repeated += static_cast<int64_t>(r.before.count(i));
    EXPECT_EQ(repeated, padding);
  }
  // drop_last: nothing repeats, and fewer than `world` samples are dropped.
  const Resumed dropped = resume_at(3, size, 3, 7, DistributedSamplerOptions().drop_last(true));
  for (int64_t i : dropped.after) EXPECT_EQ(dropped.before.count(i), 0u) << i;
  EXPECT_EQ(dropped.after.size(), 60u);  // 61 left, 3 ranks: 20 each
}

TEST(DataDistributedSampler, GlobalRestoreAtTheSameWorldSizeEqualsRestore) {
  for (int rank = 0; rank < 3; ++rank) {
    DistributedSampler by_position(100, 3, rank, DistributedSamplerOptions().seed(2));
    by_position.restore(1, 10);
    DistributedSampler by_global(100, 3, rank, DistributedSamplerOptions().seed(2));
    by_global.restore_global(1, 30);
    EXPECT_EQ(by_global.next(1000), by_position.next(1000)) << "rank " << rank;
    EXPECT_EQ(by_global.global_position(), 100 + 2);  // 30 + 24 × 3, with 2 padded
    by_global.set_epoch(2);                           // the next epoch is whole again
    EXPECT_EQ(by_global.shard_size(), 34);
    EXPECT_EQ(by_global.global_position(), 0);
  }
  EXPECT_THROW(DistributedSampler(10, 1, 0).restore_global(0, -1), ddp::ConfigError);
  DistributedSampler finished(10, 3, 0);
  finished.restore_global(0, 12);  // a 2-rank job's padded end: nothing left
  EXPECT_TRUE(finished.next(4).empty());
}

TEST(DataDistributedSampler, BadArgumentsAreConfigErrorsSayingWhy) {
  EXPECT_NE(error_of<ddp::ConfigError>([] { DistributedSampler(0, 2, 0); }).find("empty (size 0)"),
            std::string::npos);
  EXPECT_NE(
      error_of<ddp::ConfigError>([] { DistributedSampler(10, 2, 2); }).find("rank 2 of 2 replicas"),
      std::string::npos);
  EXPECT_NE(
      error_of<ddp::ConfigError>([] { DistributedSampler(10, 0, 0); }).find("rank 0 of 0 replicas"),
      std::string::npos);
  EXPECT_NE(error_of<ddp::ConfigError>([] {
              DistributedSampler(3, 4, 0, DistributedSamplerOptions().drop_last(true));
            }).find("3 samples leave nothing for 4 replicas"),
            std::string::npos);
  EXPECT_NE(error_of<ddp::ConfigError>([] {
              DistributedSampler(10, 2, 0).restore(0, 6);
            }).find("position 6 of a shard of 5"),
            std::string::npos);
}

// SnapshotManager::save_async() over two ranks (threads of this process in
// a Gloo group, Note [An asynchronous save]): the ranks agree on the path
// and resume together; a failure of rank 0's background write is rank 0's
// own error there and names rank 0 on rank 1. With a ZeroRedundancyOptimizer
// every rank writes its shard in the background and the files equal save()'s;
// a shard that fails makes rank 0 give the main file up at once; shards on
// node-local disks are agreed through the store.

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "common/error_capture.hpp"
#include "common/temporary_directory.hpp"
#include "ddp/comm/init.hpp"
#include "ddp/parallel/zero_redundancy_optimizer.hpp"
#include "ddp/snapshot/errors.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"

namespace ddp::snapshot {
namespace {

namespace fs = std::filesystem;
using ddp::testing::error_of;
using Clock = std::chrono::steady_clock;

constexpr int kWorld = 2;

bool mentions(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// Runs `body(rank, group)` on kWorld threads, the ranks of one Gloo group;
// rethrows the first exception.
void on_two_ranks(const std::function<void(int, const std::shared_ptr<ProcessGroup>&)>& body) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::future<void>> ranks;
  for (int rank = 0; rank < kWorld; ++rank) {
    ranks.push_back(std::async(std::launch::async, [&, rank] {
      const auto options =
          InitOptions().backend("gloo").store(store).rank(rank).world_size(kWorld).master_addr(
              "127.0.0.1");
      body(rank, init(options, EnvironmentMap{}));
    }));
  }
  for (auto& r : ranks) {
    if (r.wait_for(std::chrono::seconds(120)) != std::future_status::ready) {
      ADD_FAILURE() << "the ranks did not finish within 120 s";
      std::abort();  // a thread stuck in a collective cannot be joined
    }
  }
  for (auto& r : ranks) r.get();
}

// A directory where a temporary file must go: stops that write, for root too.
void block(const std::string& dir, const std::string& temp_name) {
  fs::create_directories(fs::path(dir) / temp_name / "blocker");
}

void expect_same_file(const std::string& a, const std::string& b) {
  const SnapshotFile fa = read_snapshot_file(a), fb = read_snapshot_file(b);
  EXPECT_EQ(fa.scalars_json, fb.scalars_json) << a << " and " << b;
  ASSERT_EQ(fa.tensors.size(), fb.tensors.size()) << a << " and " << b;
  for (const auto& [name, tensor] : fa.tensors) {
    ASSERT_EQ(fb.tensors.count(name), 1u) << name;
    EXPECT_TRUE(torch::equal(tensor, fb.tensors.at(name))) << b << ": " << name;
  }
}

class SnapshotAsyncRanks : public ::testing::Test {
 protected:
  const ddp::testing::TemporaryDirectory dir_{"ddp-snapshot-async-ranks-"};
};

TEST_F(SnapshotAsyncRanks, RanksAgreeOnThePathAndAFailureIsReportedOnBoth) {
  std::string paths[kWorld], errors[kWorld];
  torch::manual_seed(1);
  torch::nn::Linear models[kWorld] = {torch::nn::Linear(8, 4), torch::nn::Linear(8, 4)};
  torch::nn::Linear fresh[kWorld] = {torch::nn::Linear(8, 4), torch::nn::Linear(8, 4)};
  bool resumed[kWorld] = {false, false};
  on_two_ranks([&](int rank, const std::shared_ptr<ProcessGroup>& group) {
    TrainingState state;
    state.model = models[rank].ptr().get();
    state.include_rng = false;  // the threads share one generator
    state.counters["rank"] = rank;
    SnapshotManager snapshots(SnapshotOptions(dir_.string()), group);
    paths[rank] = snapshots.save_async(state);
    snapshots.wait();
    TrainingState restored;
    restored.model = fresh[rank].ptr().get();
    restored.include_rng = false;
    resumed[rank] = snapshots.resume(restored) && restored.counters.at("rank") == 0;

    if (rank == 0) block(dir_.string(), ".snapshot-000000000002.ddpsnap.tmp");
    snapshots.save_async(state);
    errors[rank] = error_of<SnapshotError>([&] { snapshots.wait(); });
  });
  EXPECT_EQ(paths[0], dir_.file("snapshot-000000000001.ddpsnap"));
  EXPECT_EQ(paths[1], paths[0]);
  EXPECT_TRUE(resumed[0] && resumed[1]);
  for (int rank = 0; rank < kWorld; ++rank) {  // rank 0's model, on both
    EXPECT_TRUE(torch::equal(fresh[rank]->weight, models[0]->weight)) << "rank " << rank;
  }
  EXPECT_TRUE(mentions(errors[0],
                       "cannot write snapshot " + dir_.file(".snapshot-000000000002.ddpsnap.tmp")))
      << errors[0];
  EXPECT_TRUE(mentions(errors[1], "the asynchronous save of " +
                                      dir_.file("snapshot-000000000002.ddpsnap") +
                                      " failed on rank 0"))
      << errors[1];
}

// One rank's model (made before the threads start: they share the
// generator) and ZeRO-1 (SGD with momentum) over it.
struct ZeroRank {
  explicit ZeroRank(int seed) : net((torch::manual_seed(seed), torch::nn::Linear(16, 8))) {
    state.model = net.ptr().get();
    state.include_rng = false;
  }
  void make_optimizer(const std::shared_ptr<ProcessGroup>& group) {
    zero = std::make_unique<ZeroRedundancyOptimizer>(
        net->parameters(),
        zero_optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1).momentum(0.9)),
        ZeroRedundancyOptimizerOptions().stage(1), group);
    state.zero_optimizer = zero.get();
  }
  void step(int rank) {
    zero->zero_grad();
    torch::Tensor x = torch::arange(32, torch::kFloat).reshape({2, 16}) / 32 + rank;
    net->forward(x).pow(2).sum().backward();
    zero->step();
  }
  torch::nn::Linear net;
  std::unique_ptr<ZeroRedundancyOptimizer> zero;
  TrainingState state;
};

TEST_F(SnapshotAsyncRanks, ZeroShardsAreWrittenInTheBackgroundAsSaveWritesThem) {
  const std::string sync_dir = dir_.file("sync"), async_dir = dir_.file("async");
  std::string errors[kWorld];
  double seconds[kWorld] = {0, 0};
  std::vector<at::Tensor> saved_weights(kWorld), resumed_weights(kWorld);
  std::vector<std::unique_ptr<ZeroRank>> mine, fresh;
  for (int rank = 0; rank < kWorld; ++rank) {
    mine.push_back(std::make_unique<ZeroRank>(3));
    fresh.push_back(std::make_unique<ZeroRank>(99));  // other weights
  }
  on_two_ranks([&](int rank, const std::shared_ptr<ProcessGroup>& group) {
    ZeroRank& me = *mine[rank];
    me.make_optimizer(group);
    me.step(rank);
    me.step(rank);
    SnapshotManager(SnapshotOptions(sync_dir), group).save(me.state);
    SnapshotManager snapshots(SnapshotOptions(async_dir), group);
    snapshots.save_async(me.state);
    saved_weights[rank] = me.net->weight.detach().clone();
    me.step(rank);  // while the shards are written
    snapshots.wait();

    ZeroRank& other = *fresh[rank];
    other.make_optimizer(group);
    EXPECT_TRUE(snapshots.resume(other.state));
    resumed_weights[rank] = other.net->weight.detach().clone();

    // Rank 1's shard fails: rank 0's thread gives the main file up at once.
    if (rank == 1) block(async_dir, ".snapshot-000000000002.shard-1-of-2.ddpsnap.tmp");
    const auto start = Clock::now();
    snapshots.save_async(me.state);
    errors[rank] = error_of<SnapshotError>([&] { snapshots.wait(); });
    seconds[rank] = std::chrono::duration<double>(Clock::now() - start).count();
  });
  for (const char* name :
       {"snapshot-000000000001.ddpsnap", "snapshot-000000000001.shard-0-of-2.ddpsnap",
        "snapshot-000000000001.shard-1-of-2.ddpsnap"}) {
    expect_same_file(sync_dir + "/" + name, async_dir + "/" + name);
  }
  for (int rank = 0; rank < kWorld; ++rank) {
    ASSERT_TRUE(resumed_weights[rank].defined());
    EXPECT_TRUE(torch::equal(resumed_weights[rank], saved_weights[rank])) << "rank " << rank;
  }
  EXPECT_TRUE(mentions(errors[1], "cannot write snapshot " + async_dir +
                                      "/.snapshot-000000000002.shard-1-of-2.ddpsnap.tmp"))
      << errors[1];
  EXPECT_TRUE(mentions(errors[0], "failed on rank 1")) << errors[0];
  EXPECT_LT(seconds[0], 30) << "rank 0 waited for a shard that had failed";
  EXPECT_FALSE(fs::exists(async_dir + "/snapshot-000000000002.ddpsnap"));
}

// Node-local disks: each rank saves into a directory only it sees, so rank
// 0 can never find rank 1's shard file; the ranks agree through the store
// (Note [Shards agreed through the store] in src/snapshot/async_save.cpp).
// Rank 0's main file once waited 10 minutes for a file that never appeared.
// Gathered afterwards (as a job copies node-local files to resume), the
// files resume the saved state.
TEST_F(SnapshotAsyncRanks, ShardsOnNodeLocalDisksAreAgreedThroughTheStore) {
  const std::string local[kWorld] = {dir_.file("node-0"), dir_.file("node-1")};
  std::vector<at::Tensor> saved_weights(kWorld), resumed_weights(kWorld);
  std::vector<std::unique_ptr<ZeroRank>> mine, fresh;
  for (int rank = 0; rank < kWorld; ++rank) {
    mine.push_back(std::make_unique<ZeroRank>(3));
    fresh.push_back(std::make_unique<ZeroRank>(99));
  }
  double seconds[kWorld] = {0, 0};
  on_two_ranks([&](int rank, const std::shared_ptr<ProcessGroup>& group) {
    ZeroRank& me = *mine[rank];
    me.make_optimizer(group);
    me.step(rank);
    SnapshotManager snapshots(SnapshotOptions(local[rank]), group);
    const auto start = Clock::now();
    snapshots.save_async(me.state);
    saved_weights[rank] = me.net->weight.detach().clone();
    me.step(rank);
    snapshots.wait();
    seconds[rank] = std::chrono::duration<double>(Clock::now() - start).count();
  });
  EXPECT_LT(seconds[0], 30) << "rank 0 waited for a file on another node's disk";
  EXPECT_TRUE(fs::exists(local[0] + "/snapshot-000000000001.ddpsnap"));
  EXPECT_TRUE(fs::exists(local[0] + "/snapshot-000000000001.shard-0-of-2.ddpsnap"));
  EXPECT_TRUE(fs::exists(local[1] + "/snapshot-000000000001.shard-1-of-2.ddpsnap"));
  EXPECT_FALSE(fs::exists(local[1] + "/snapshot-000000000001.ddpsnap"));
  fs::copy_file(local[1] + "/snapshot-000000000001.shard-1-of-2.ddpsnap",
                local[0] + "/snapshot-000000000001.shard-1-of-2.ddpsnap");
  on_two_ranks([&](int rank, const std::shared_ptr<ProcessGroup>& group) {
    ZeroRank& other = *fresh[rank];
    other.make_optimizer(group);
    EXPECT_TRUE(SnapshotManager(SnapshotOptions(local[0]), group).resume(other.state));
    resumed_weights[rank] = other.net->weight.detach().clone();
  });
  for (int rank = 0; rank < kWorld; ++rank) {
    ASSERT_TRUE(resumed_weights[rank].defined());
    EXPECT_TRUE(torch::equal(resumed_weights[rank], saved_weights[rank])) << "rank " << rank;
  }
}

}  // namespace
}  // namespace ddp::snapshot

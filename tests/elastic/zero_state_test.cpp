// elastic::State with a ZeroRedundancyOptimizer (Note [ZeRO shards in
// memory]): three ranks, threads of one process in a Gloo group, commit
// their shards; a rank's State is replaced by a fresh one, as ddprun's
// replacement would be, and sync() plus restore() give it back its shard
// bit for bit, from the buddy that kept a copy. At fewer ranks each cuts
// its new shard out of the survivors' copies. Losing two neighbours loses a
// shard, and sync() says which.

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <vector>

#include "base/compat/torch_compat.hpp"
#include "ddp/comm/init.hpp"
#include "ddp/elastic.hpp"
#include "ddp/parallel/zero_redundancy_optimizer.hpp"
#include "ddp/snapshot/errors.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"

namespace ddp::elastic {
namespace {

constexpr int kWorld = 3;

// One rank: a Linear(4, 3) (15 elements, so 5 per rank cut the weight),
// Adam over its shard at stage 2, and the State that commits it.
struct Rank {
  explicit Rank(int seed) {
    torch::manual_seed(seed);
    net = torch::nn::Linear(4, 3);
    training.model = net.ptr().get();
    training.include_rng = false;  // the threads share one generator
    state = std::make_unique<State>(training);
  }
  // This generation's optimizer over `group` (the previous one goes first).
  void make_optimizer(const std::shared_ptr<ProcessGroup>& group) {
    training.zero_optimizer = nullptr;
    zero = std::make_unique<ZeroRedundancyOptimizer>(
        net->parameters(), zero_optimizer<torch::optim::Adam>(torch::optim::AdamOptions(0.01)),
        ZeroRedundancyOptimizerOptions().stage(2), group);
    training.zero_optimizer = zero.get();
  }
  void step(int times, int rank) {
    for (int i = 0; i < times; ++i) {
      zero->zero_grad();
      torch::Tensor x = torch::arange(8, torch::kFloat).reshape({2, 4}) / 8 + i + rank;
      net->forward(x).pow(2).sum().backward();
      zero->step();
    }
  }
  // The shard's Adam state, in the order of the local optimizer's pieces.
  std::vector<at::Tensor> shard() const {
    std::vector<at::Tensor> out;
    const auto& optimizer = zero->local_optimizer();
    for (const auto& piece : optimizer.param_groups().at(0).params()) {
      const auto& state = static_cast<const torch::optim::AdamParamState&>(
          *optimizer.state().at(base::compat::optimizer_state_key(piece)));
      out.push_back(state.exp_avg().clone());
      out.push_back(state.exp_avg_sq().clone());
      out.push_back(torch::full({1}, state.step(), torch::kLong));
    }
    return out;
  }
  std::vector<at::Tensor> parameters() const {
    std::vector<at::Tensor> copies;
    for (const auto& p : net->parameters()) copies.push_back(p.detach().clone());
    return copies;
  }

  torch::nn::Linear net{nullptr};
  snapshot::TrainingState training;
  std::unique_ptr<State> state;
  std::unique_ptr<ZeroRedundancyOptimizer> zero;
};

// Runs `body(rank, group)` on `size` threads, the ranks of one Gloo group;
// rethrows the first exception.
void generation(const std::function<void(int, const std::shared_ptr<ProcessGroup>&)>& body,
                int size = kWorld) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::future<void>> ranks;
  for (int rank = 0; rank < size; ++rank) {
    ranks.push_back(std::async(std::launch::async, [&, rank] {
      const auto options =
          InitOptions().backend("gloo").store(store).rank(rank).world_size(size).master_addr(
              "127.0.0.1");
      auto group = init(options, EnvironmentMap{});
      body(rank, group);
    }));
  }
  for (auto& r : ranks) {
    if (r.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
      ADD_FAILURE() << "a generation did not finish within 60 s";
      std::abort();  // a thread stuck in a collective cannot be joined
    }
  }
  for (auto& r : ranks) r.get();
}

void expect_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b,
                  const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_TRUE(torch::equal(a[i], b[i])) << what << ", tensor " << i;
  }
}

// Generation 0 on `ranks`: two steps, a commit (and a snapshot of the same
// state into `snapshot_dir`, if given), one more step (which restore() must
// undo); returns each rank's committed shard and parameters.
struct Committed {
  std::vector<std::vector<at::Tensor>> shards, parameters;
};
Committed train_and_commit(std::vector<std::unique_ptr<Rank>>& ranks,
                           const std::string& snapshot_dir = "") {
  Committed committed{std::vector<std::vector<at::Tensor>>(kWorld),
                      std::vector<std::vector<at::Tensor>>(kWorld)};
  generation([&](int r, const std::shared_ptr<ProcessGroup>& group) {
    Rank& me = *ranks[static_cast<size_t>(r)];
    me.make_optimizer(group);
    me.step(2, r);
    me.state->commit();
    if (!snapshot_dir.empty()) {
      snapshot::SnapshotManager(snapshot::SnapshotOptions(snapshot_dir), group).save(me.training);
    }
    committed.shards[static_cast<size_t>(r)] = me.shard();
    committed.parameters[static_cast<size_t>(r)] = me.parameters();
    me.step(1, r);
  });
  return committed;
}

// Generation `g` on `ranks`: sync, a new optimizer, restore; returns each
// rank's shard and parameters after the restore.
Committed sync_and_restore(std::vector<std::unique_ptr<Rank>>& ranks) {
  Committed restored{std::vector<std::vector<at::Tensor>>(kWorld),
                     std::vector<std::vector<at::Tensor>>(kWorld)};
  generation([&](int r, const std::shared_ptr<ProcessGroup>& group) {
    Rank& me = *ranks[static_cast<size_t>(r)];
    me.state->sync(*group);
    me.make_optimizer(group);
    me.state->restore();
    restored.shards[static_cast<size_t>(r)] = me.shard();
    restored.parameters[static_cast<size_t>(r)] = me.parameters();
  });
  return restored;
}

std::vector<std::unique_ptr<Rank>> three_ranks() {
  std::vector<std::unique_ptr<Rank>> ranks;
  for (int r = 0; r < kWorld; ++r) ranks.push_back(std::make_unique<Rank>(40));
  return ranks;
}

TEST(ElasticZeroState, AReplacedRankGetsItsShardBackFromItsBuddyBitForBit) {
  auto ranks = three_ranks();
  const Committed committed = train_and_commit(ranks);
  ranks[1] = std::make_unique<Rank>(99);  // rank 1 lost: a fresh process, commits 0
  ASSERT_EQ(ranks[1]->state->commits(), 0);

  const Committed restored = sync_and_restore(ranks);
  for (int r = 0; r < kWorld; ++r) {
    const std::string who = "rank " + std::to_string(r);
    expect_equal(restored.shards[static_cast<size_t>(r)], committed.shards[static_cast<size_t>(r)],
                 who + "'s shard");
    expect_equal(restored.parameters[static_cast<size_t>(r)], committed.parameters[0],
                 who + "'s parameters");
    EXPECT_EQ(ranks[static_cast<size_t>(r)]->state->commits(), 1) << who;
  }

  // The sync gave the replacement a copy of rank 0's shard again: losing
  // rank 0 now restores it from rank 1.
  ranks[0] = std::make_unique<Rank>(98);
  const Committed again = sync_and_restore(ranks);
  for (int r = 0; r < kWorld; ++r) {
    expect_equal(again.shards[static_cast<size_t>(r)], committed.shards[static_cast<size_t>(r)],
                 "after losing rank 0, rank " + std::to_string(r) + "'s shard");
  }
}

// Old ranks 0 and 2 go on as ranks 0 and 1 of two: each receives every
// old shard and cuts its new one out of them, as a snapshot resumed at two
// ranks cuts it out of the shard files.
TEST(ElasticZeroState, AtFewerRanksEachRankCutsItsNewShardOutOfTheOldOnes) {
  const std::string dir = (std::filesystem::temp_directory_path() /
                           ("ddp-zero-state-test-" + std::to_string(::getpid())))
                              .string();
  std::filesystem::remove_all(dir);
  auto ranks = three_ranks();
  train_and_commit(ranks, dir);
  std::vector<Rank*> survivors = {ranks[0].get(), ranks[2].get()};
  std::vector<std::vector<at::Tensor>> in_memory(2), from_files(2);
  generation(
      [&](int r, const std::shared_ptr<ProcessGroup>& group) {
        Rank& me = *survivors[static_cast<size_t>(r)];
        me.state->sync(*group);
        me.make_optimizer(group);
        me.state->restore();
        in_memory[static_cast<size_t>(r)] = me.shard();
      },
      2);
  std::vector<std::unique_ptr<Rank>> resumed;
  for (int r = 0; r < 2; ++r) resumed.push_back(std::make_unique<Rank>(95));
  generation(
      [&](int r, const std::shared_ptr<ProcessGroup>& group) {
        Rank& me = *resumed[static_cast<size_t>(r)];
        me.make_optimizer(group);
        snapshot::SnapshotManager(snapshot::SnapshotOptions(dir), group).resume(me.training);
        from_files[static_cast<size_t>(r)] = me.shard();
      },
      2);
  std::filesystem::remove_all(dir);
  for (int r = 0; r < 2; ++r) {
    ASSERT_FALSE(in_memory[static_cast<size_t>(r)].empty()) << "rank " << r;
    expect_equal(in_memory[static_cast<size_t>(r)], from_files[static_cast<size_t>(r)],
                 "rank " + std::to_string(r) + " of 2's shard");
  }
}

TEST(ElasticZeroState, LosingTwoNeighboursNamesTheLostShard) {
  auto ranks = three_ranks();
  train_and_commit(ranks);
  ranks[1] = std::make_unique<Rank>(97);  // rank 1's shard was kept by ranks 1 and 2
  ranks[2] = std::make_unique<Rank>(96);
  std::vector<std::string> messages(kWorld);
  generation([&](int r, const std::shared_ptr<ProcessGroup>& group) {
    try {
      ranks[static_cast<size_t>(r)]->state->sync(*group);
    } catch (const SnapshotError& e) {
      messages[static_cast<size_t>(r)] = e.what();
    }
  });
  for (int r = 0; r < kWorld; ++r) {
    EXPECT_NE(messages[static_cast<size_t>(r)].find(
                  "commit 1 in memory lost rank 1's ZeroRedundancyOptimizer shard: ranks 1 and 2 "
                  "of 3, which held its only copies, both failed"),
              std::string::npos)
        << "rank " << r << ": '" << messages[static_cast<size_t>(r)] << "'";
  }
  EXPECT_EQ(ranks[0]->state->commits(), 1);  // nothing changed
}

TEST(ElasticZeroState, RestoreWithoutTheShardedOptimizerIsRefused) {
  auto ranks = three_ranks();
  train_and_commit(ranks);
  Rank& rank0 = *ranks[0];
  rank0.training.zero_optimizer = nullptr;  // the generation's optimizer is gone
  try {
    rank0.state->restore();
    FAIL() << "restored a commit with shards without an optimizer to take them";
  } catch (const SnapshotError& e) {
    EXPECT_NE(std::string(e.what()).find("holds ZeroRedundancyOptimizer shards and "
                                         "TrainingState::zero_optimizer is null"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ddp::elastic

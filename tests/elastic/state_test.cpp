// elastic::State: a commit comes back exactly (parameters, optimizer state,
// counters, generators), and sync() gives every rank the most advanced
// commit, from the lowest rank that holds it, over a real Gloo group of
// three threads.

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <future>
#include <optional>
#include <vector>

#include "ddp/comm/init.hpp"
#include "ddp/elastic.hpp"
#include "ddp/parallel/fully_sharded_data_parallel.hpp"
#include "ddp/parallel/fully_sharded_state.hpp"
#include "ddp/parallel/zero_redundancy_optimizer.hpp"
#include "ddp/snapshot/errors.hpp"

namespace ddp::elastic {
namespace {

// A Linear(4, 3) with Adam, trained a few steps on fixed data.
struct Trainee {
  explicit Trainee(int seed) {
    torch::manual_seed(seed);
    net = torch::nn::Linear(4, 3);
    adam = std::make_unique<torch::optim::Adam>(net->parameters(), 0.01);
    state.model = net.ptr().get();
    state.optimizer = adam.get();
  }
  void step(int times) {
    for (int i = 0; i < times; ++i) {
      adam->zero_grad();
      torch::Tensor x = torch::arange(8, torch::kFloat).reshape({2, 4}) / 8 + i;
      net->forward(x).pow(2).sum().backward();
      adam->step();
      ++state.counters["global_step"];
    }
  }
  std::vector<at::Tensor> parameters() const {
    std::vector<at::Tensor> copies;
    for (const auto& p : net->parameters()) copies.push_back(p.detach().clone());
    return copies;
  }
  // Adam's first moment of the weight, as a snapshot names it.
  at::Tensor first_moment() const {
    return snapshot::capture_training_state(state).tensors.at("optim/g0/p0/exp_avg");
  }
  torch::nn::Linear net{nullptr};
  std::unique_ptr<torch::optim::Adam> adam;
  snapshot::TrainingState state;
};

void expect_equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << "tensor " << i;
}

TEST(ElasticState, RestoreReturnsToTheCommitExactly) {
  Trainee t(1);
  t.step(2);
  State state(t.state);
  const auto untouched = t.parameters();
  state.restore();  // nothing committed: nothing changes
  expect_equal(t.parameters(), untouched);
  EXPECT_EQ(state.commits(), 0);

  t.state.epoch = 3;
  state.commit();
  const auto committed = t.parameters();
  const at::Tensor moment = t.first_moment();
  const at::Tensor draws = torch::rand({6});  // the generator after the commit
  t.step(3);
  t.state.epoch = 4;
  ASSERT_FALSE(torch::equal(t.parameters()[0], committed[0]));

  state.restore();
  expect_equal(t.parameters(), committed);
  EXPECT_TRUE(torch::equal(t.first_moment(), moment));
  EXPECT_EQ(t.state.epoch, 3);
  EXPECT_EQ(t.state.counters.at("global_step"), 2);
  EXPECT_TRUE(torch::equal(torch::rand({6}), draws));
  EXPECT_EQ(state.commits(), 1);
}

// The observer run() watches for a re-formed job with (Note [A node joins
// in memory]): called once per commit, after it is made, so that what it
// throws leaves the commit in place; an empty function removes it.
TEST(ElasticState, TheCommitObserverRunsAfterTheCommitAndMayThrow) {
  Trainee t(3);
  State state(t.state);
  std::vector<int64_t> seen;  // commits() as the observer saw it
  state.on_commit([&] {
    seen.push_back(state.commits());
    if (seen.size() == 2) throw MembershipChange(0, 1, state.commits());
  });
  state.commit();
  t.step(1);
  const auto committed = t.parameters();
  EXPECT_THROW(state.commit(), MembershipChange);
  EXPECT_EQ(seen, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(state.commits(), 2);
  t.step(2);
  state.restore();  // back to the commit that threw
  expect_equal(t.parameters(), committed);
  state.on_commit(nullptr);
  state.commit();
  EXPECT_EQ(seen.size(), 2u);
  EXPECT_EQ(state.commits(), 3);
}

// Rank r of a Gloo group of `size` threads meeting in `store`.
std::shared_ptr<ProcessGroup> member(const c10::intrusive_ptr<c10d::Store>& store, int rank,
                                     int size) {
  return init(InitOptions().backend("gloo").store(store).rank(rank).world_size(size).master_addr(
                  "127.0.0.1"),
              EnvironmentMap{});
}

// Runs sync() on `states` as the ranks of one group; returns each result.
std::vector<std::optional<int>> sync_all(std::vector<State*> states) {
  auto store = c10::make_intrusive<c10d::HashStore>();
  std::vector<std::future<std::optional<int>>> results;
  const int size = static_cast<int>(states.size());
  for (int rank = 0; rank < size; ++rank) {
    results.push_back(std::async(std::launch::async, [&, rank] {
      auto group = member(store, rank, size);
      return states[static_cast<size_t>(rank)]->sync(*group);
    }));
  }
  std::vector<std::optional<int>> out;
  for (auto& r : results) {
    if (r.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
      ADD_FAILURE() << "sync did not finish within 60 s";
      std::abort();  // a thread stuck in a collective cannot be joined
    }
    out.push_back(r.get());
  }
  return out;
}

TEST(ElasticState, SyncGivesEveryRankTheMostAdvancedCommitOfTheLowestRankHoldingIt) {
  // Ranks 0 and 2 committed twice (different states), rank 1 once; rank 0
  // trained on after its commit, so it must roll back too.
  Trainee t0(10), t1(11), t2(12);
  for (Trainee* t : {&t0, &t1, &t2}) t->state.include_rng = false;  // one generator per process
  State s0(t0.state), s1(t1.state), s2(t2.state);
  t0.step(1);
  s0.commit();
  t0.step(2);
  t0.state.epoch = 5;
  t0.state.samples_in_epoch = 96;
  s0.commit();
  const auto expected = t0.parameters();
  const at::Tensor moment = t0.first_moment();
  t0.step(1);
  t1.step(4);
  s1.commit();
  t2.step(1);
  s2.commit();
  s2.commit();

  const auto senders = sync_all({&s0, &s1, &s2});
  for (int rank = 0; rank < 3; ++rank) {
    ASSERT_TRUE(senders[static_cast<size_t>(rank)].has_value()) << "rank " << rank;
    EXPECT_EQ(*senders[static_cast<size_t>(rank)], 0) << "rank " << rank;
  }
  for (Trainee* t : {&t0, &t1, &t2}) {
    expect_equal(t->parameters(), expected);
    EXPECT_TRUE(torch::equal(t->first_moment(), moment));
    EXPECT_EQ(t->state.epoch, 5);
    EXPECT_EQ(t->state.samples_in_epoch, 96);
    EXPECT_EQ(t->state.counters.at("global_step"), 3);
  }
  for (State* s : {&s0, &s1, &s2}) EXPECT_EQ(s->commits(), 2);
  // restore() now comes back to the synced state on every rank.
  t1.step(2);
  s1.restore();
  expect_equal(t1.parameters(), expected);
}

TEST(ElasticState, SyncWithoutAnyCommitChangesNothing) {
  Trainee t0(20), t1(21);
  for (Trainee* t : {&t0, &t1}) t->state.include_rng = false;
  State s0(t0.state), s1(t1.state);
  const auto before0 = t0.parameters(), before1 = t1.parameters();
  const auto senders = sync_all({&s0, &s1});
  EXPECT_FALSE(senders[0].has_value());
  EXPECT_FALSE(senders[1].has_value());
  expect_equal(t0.parameters(), before0);
  expect_equal(t1.parameters(), before1);
}

// In a group of one, a ZeRO commit keeps the one shard (its own buddy) and
// restore() brings it back (tests/elastic/zero_state_test.cpp: three ranks).
TEST(ElasticState, AShardedOptimizerIsCommittedAndRestoredInAGroupOfOne) {
  Trainee t(30);
  auto group = init(InitOptions(), EnvironmentMap{});
  ZeroRedundancyOptimizer zero(
      t.net->parameters(),
      zero_optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.1).momentum(0.9)), group);
  t.state.optimizer = nullptr;
  t.state.zero_optimizer = &zero;
  State state(t.state);
  auto train = [&] {
    zero.zero_grad();
    t.net->forward(torch::ones({2, 4})).pow(2).sum().backward();
    zero.step();
  };
  train();
  state.commit();
  const auto committed = t.parameters();
  train();
  train();
  state.restore();
  expect_equal(t.parameters(), committed);
  train();  // the momentum is the committed one: the same step as straight after the commit
  const auto replayed = t.parameters();
  state.restore();
  train();
  expect_equal(t.parameters(), replayed);
  EXPECT_EQ(state.commits(), 1);
}

// FSDP with a frozen layer outside the optimizer (Note [Pieces outside the
// optimizer]): the commit keeps the frozen layer's shard, which exists
// nowhere else, and restore() brings it back with the trained ones.
TEST(ElasticState, FullyShardedWithAFrozenLayerOutsideTheOptimizerComesBack) {
  torch::manual_seed(40);
  torch::nn::Sequential net(torch::nn::Linear(4, 6), torch::nn::Tanh(), torch::nn::Linear(6, 3));
  for (auto& p : net[0]->parameters()) p.requires_grad_(false);
  auto group = init(InitOptions(), EnvironmentMap{});
  FullyShardedDataParallel model(net, group);
  std::vector<at::Tensor> trainable;
  for (const auto& p : model->parameters()) {
    if (p.requires_grad()) trainable.push_back(p);
  }
  ASSERT_EQ(trainable.size(), 2U);
  torch::optim::Adam adam(trainable, 0.01);
  FullyShardedState sharded(model, adam);
  snapshot::TrainingState training;
  training.model = model->module().get();
  training.fully_sharded = &sharded;
  State state(training);
  auto train = [&] {
    adam.zero_grad();
    model->forward(torch::ones({2, 4})).pow(2).sum().backward();
    adam.step();
  };
  auto full = [&] {
    std::vector<at::Tensor> values;
    for (const auto& item : model->full_parameters()) values.push_back(item.value());
    return values;
  };
  train();
  state.commit();
  const auto committed = full();
  train();
  {
    torch::NoGradGuard no_grad;
    for (auto& p : model->parameters()) p.add_(1);  // the frozen shard too
  }
  state.restore();
  expect_equal(full(), committed);
}

}  // namespace
}  // namespace ddp::elastic

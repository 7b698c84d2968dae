#include "multiprocess/join_checks.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <string>
#include <vector>

#include "common/models.hpp"
#include "common/named_checks.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/parallel/distributed_data_parallel.hpp"
#include "ddp/parallel/join.hpp"
#include "ddp/parallel/zero_redundancy_optimizer.hpp"

namespace ddp::testing {
namespace {

using examples::ConvNet;
using examples::Mlp;

constexpr int64_t kRows = 4;  // samples per batch

// Rank r's batch number `step`: the same on every rank that computes it.
std::pair<torch::Tensor, torch::Tensor> batch_of(int rank, int step, bool images) {
  torch::manual_seed(5000 + 97 * rank + step);
  if (images) {
    return {torch::randn({kRows, 1, 28, 28}), torch::randint(0, 10, {kRows})};
  }
  return {torch::randn({kRows, 8}), torch::randn({kRows, 4})};
}

torch::Tensor loss_of(const torch::Tensor& output, const torch::Tensor& target, bool images) {
  return images ? torch::cross_entropy_loss(output, target) : torch::mse_loss(output, target);
}

// Every rank's values, concatenated: equal everywhere iff the maximum over
// the ranks equals the minimum.
bool same_on_every_rank(ProcessGroup& group, const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> flat;
  for (const auto& t : tensors) flat.push_back(t.detach().to(torch::kDouble).reshape({-1}));
  torch::Tensor high = torch::cat(flat), low = high.clone();
  group.all_reduce(high, ReduceOp::kMax);
  group.all_reduce(low, ReduceOp::kMin);
  return torch::equal(high, low);
}

class JoinChecker {
 public:
  explicit JoinChecker(std::shared_ptr<ProcessGroup> group)
      : group_(std::move(group)), rank_(group_->rank()), world_(group_->size()) {}

  // Rank r trains on batches[r] batches, then joins; the reference applies
  // at each step the gradients of the ranks that still had a batch, divided
  // by the world size or by their number.
  // With `micro` > 1, each step accumulates `micro` batches, all but the
  // last inside no_sync() (iterations whose round does not synchronize).
  template <typename Model>
  void uneven(const std::string& name, std::vector<int> batches, bool by_contributors, bool images,
              const DistributedDataParallelOptions& options = {}, int micro = 1) {
    torch::manual_seed(31 + rank_);  // DDP must copy rank 0's weights
    Model net = make_model<Model>();
    DistributedDataParallel model(net, options, group_);
    torch::optim::SGD optimizer(model->parameters(), 0.05);
    int source = -1;
    {
      Join join({model.get()}, JoinOptions().divide_by_initial_world_size(!by_contributors));
      for (int step = 0; step < batches[rank_]; ++step) {
        optimizer.zero_grad();
        for (int k = 0; k + 1 < micro; ++k) {
          auto guard = model->no_sync();
          auto [x, y] = batch_of(rank_, step * micro + k, images);
          loss_of(model->forward(x), y, images).backward();
        }
        auto [x, y] = batch_of(rank_, step * micro + micro - 1, images);
        loss_of(model->forward(x), y, images).backward();
        optimizer.step();
      }
      source = join.join();
    }
    torch::manual_seed(31);
    Model reference = make_model<Model>();
    torch::optim::SGD reference_optimizer(reference->parameters(), 0.05);
    const int steps = *std::max_element(batches.begin(), batches.end());
    for (int step = 0; step < steps; ++step) {
      int active = 0;
      for (int b : batches) active += b > step;
      const double divisor = by_contributors ? active : world_;
      reference_optimizer.zero_grad();
      for (int r = 0; r < world_; ++r) {
        if (batches[r] <= step) continue;
        for (int k = 0; k < micro; ++k) {
          auto [x, y] = batch_of(r, step * micro + k, images);
          (loss_of(reference->forward(x), y, images) / divisor).backward();
        }
      }
      reference_optimizer.step();
    }
    checks_.close_all(check_name(name, join_check::kParameters), net->parameters(),
                      reference->parameters(), 1e-5);
    std::vector<torch::Tensor> state = net->parameters();
    for (const auto& b : net->buffers()) state.push_back(b);
    checks_.check(check_name(name, join_check::kSameStateEverywhere),
                  same_on_every_rank(*group_, state));
    int last = 0;
    for (int r = 0; r < world_; ++r) {
      if (batches[r] >= batches[last]) last = r;  // the highest of the longest
    }
    checks_.check(check_name(name, join_check::kLastRankNamed), source == last,
                  "returned " + std::to_string(source) + ", expected " + std::to_string(last));
  }

  // ZeroRedundancyOptimizer under a Join: stage 1 beside DDP (joined after
  // it) or stage 2 alone; the joined ranks keep stepping their shards.
  void zero_uneven(const std::string& name, int stage, const ZeroOptimizerFactory& factory,
                   std::vector<int> batches, bool by_contributors) {
    torch::manual_seed(31);
    Mlp net(8, 16, 4);
    std::shared_ptr<DistributedDataParallel> model;
    if (stage == 1) model = std::make_shared<DistributedDataParallel>(net, group_);
    ZeroRedundancyOptimizer optimizer(net->parameters(), factory,
                                      ZeroRedundancyOptimizerOptions().stage(stage), group_);
    std::vector<Joinable*> joinables;
    if (model) joinables.push_back(model->get());
    joinables.push_back(&optimizer);
    {
      Join join(joinables, JoinOptions().divide_by_initial_world_size(!by_contributors));
      for (int step = 0; step < batches[rank_]; ++step) {
        optimizer.zero_grad();
        auto [x, y] = batch_of(rank_, step, false);
        torch::mse_loss(model ? (*model)->forward(x) : net->forward(x), y).backward();
        optimizer.step();
      }
      join.join();
    }
    torch::manual_seed(31);
    Mlp reference(8, 16, 4);
    auto reference_optimizer = factory(reference->parameters());
    const int steps = *std::max_element(batches.begin(), batches.end());
    for (int step = 0; step < steps; ++step) {
      int active = 0;
      for (int b : batches) active += b > step;
      reference_optimizer->zero_grad();
      for (int r = 0; r < world_; ++r) {
        if (batches[r] <= step) continue;
        auto [x, y] = batch_of(r, step, false);
        (torch::mse_loss(reference->forward(x), y) / (by_contributors ? active : world_))
            .backward();
      }
      reference_optimizer->step();
    }
    checks_.close_all(check_name(name, join_check::kParameters), net->parameters(),
                      reference->parameters(), 1e-5);
    checks_.check(check_name(name, join_check::kSameParametersEverywhere),
                  same_on_every_rank(*group_, net->parameters()));
  }

  // Ranks with 2, 3 and 3 batches: the ranks still training throw at their
  // third forward, the joined rank in its first round; nobody hangs.
  void early_termination() {
    const std::vector<int> batches = {2, 3, 3};
    torch::manual_seed(31);
    DistributedDataParallel model(Mlp(8, 16, 4), group_);
    torch::optim::SGD optimizer(model->parameters(), 0.05);
    std::string message;
    try {
      Join join({model.get()}, JoinOptions().throw_on_early_termination(true));
      for (int step = 0; step < batches[rank_]; ++step) {
        auto [x, y] = batch_of(rank_, step, false);
        optimizer.zero_grad();
        torch::mse_loss(model->forward(x), y).backward();
        optimizer.step();
      }
      join.join();
    } catch (const CollectiveError& e) {
      message = e.what();
    }
    checks_.check(
        join_check::kEarlyTermination,
        message.find("sees 1 of the 3 ranks out of inputs, and throw_on_early_termination is "
                     "set") != std::string::npos,
        "message: '" + message + "'");
  }

  int failed() const { return checks_.failed(); }

 private:
  template <typename Model>
  Model make_model() {
    if constexpr (std::is_same_v<Model, Mlp>) {
      return Mlp(8, 16, 4);
    } else {
      return Model();
    }
  }

  std::shared_ptr<ProcessGroup> group_;
  int rank_;
  int world_;
  NamedChecks checks_;
};

}  // namespace

int check_join(const std::shared_ptr<ProcessGroup>& group) {
  JoinChecker checker(group);
  checker.uneven<Mlp>(join_check::kMlpByWorldSize, {3, 5, 8}, false, false);
  checker.uneven<Mlp>(join_check::kMlpByContributors, {8, 3, 5}, true, false);
  checker.uneven<ConvNet>(join_check::kConvNetRank0JoinsFirst, {0, 2, 3}, false, true);
  checker.uneven<Mlp>(join_check::kStaticGraph, {0, 3, 5}, false, false,
                      DistributedDataParallelOptions().static_graph(true));
  checker.uneven<Mlp>(join_check::kMicroBatches, {2, 4, 3}, true, false, {}, 3);
  checker.zero_uneven(join_check::kZeroStage1, 1,
                      zero_optimizer<torch::optim::Adam>(torch::optim::AdamOptions(1e-2)),
                      {3, 5, 8}, false);
  checker.zero_uneven(
      join_check::kZeroStage2, 2,
      zero_optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.05).momentum(0.9)), {8, 0, 5},
      true);
  checker.early_termination();
  return checker.failed();
}

}  // namespace ddp::testing

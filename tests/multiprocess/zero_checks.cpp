#include "multiprocess/zero_checks.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "common/named_checks.hpp"
#include "ddp/distributed_data_parallel.hpp"
#include "ddp/errors.hpp"
#include "ddp/zero_redundancy_optimizer.hpp"
#include "multiprocess/zero_net.hpp"

namespace ddp::testing {
namespace {

namespace nn = torch::nn;
namespace optim = torch::optim;

constexpr int64_t kPerRank = 4;
constexpr int kSteps = 5;

std::pair<torch::Tensor, torch::Tensor> batchOf(int step, int world) {
  torch::manual_seed(600 + step);
  return {torch::randn({kPerRank * world, 8}), torch::randn({kPerRank * world, 4})};
}

struct OptimizerCase {
  std::string name;
  ZeroOptimizerFactory factory;
  int64_t state_per_element;  // bytes of state per float32 element
};

std::vector<OptimizerCase> optimizerCases() {
  return {
      {"SGD with momentum",
       zero_optimizer<optim::SGD>(optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-2)), 4},
      {"Adam", zero_optimizer<optim::Adam>(optim::AdamOptions(1e-2).weight_decay(1e-2)), 8},
      {"AdamW", zero_optimizer<optim::AdamW>(optim::AdamWOptions(1e-2).weight_decay(1e-1)), 8},
  };
}

class ZeroChecker {
 public:
  explicit ZeroChecker(std::shared_ptr<ProcessGroup> group)
      : group_(std::move(group)), rank_(group_->rank()), world_(group_->size()) {}

  void matchesPlainDdp(int stage, const OptimizerCase& c) {
    const std::string prefix = "stage " + std::to_string(stage) + ", " + c.name + ": ";
    // Plain DDP with the whole optimizer on every rank.
    torch::manual_seed(21);
    ZeroNet plain_net;
    DistributedDataParallel plain(
        plain_net, DistributedDataParallelOptions().find_unused_parameters(true), group_);
    auto plain_optimizer = c.factory(plain_net->parameters());
    for (int step = 0; step < kSteps; ++step) {
      auto [x, y] = batchOf(step, world_);
      plain_optimizer->zero_grad();
      torch::mse_loss(plain->forward(x.chunk(world_)[rank_]), y.chunk(world_)[rank_]).backward();
      plain_optimizer->step();
    }

    torch::manual_seed(21);
    ZeroNet net;
    const at::Tensor spare_before = net->spare->weight.detach().clone();
    std::shared_ptr<DistributedDataParallel> model;
    if (stage == 1) {
      model = std::make_shared<DistributedDataParallel>(
          net, DistributedDataParallelOptions().find_unused_parameters(true), group_);
    }
    ZeroRedundancyOptimizer optimizer(net->parameters(), c.factory,
                                      ZeroRedundancyOptimizerOptions().stage(stage), group_);
    bool released = true;
    for (int step = 0; step < kSteps; ++step) {
      auto [x, y] = batchOf(step, world_);
      optimizer.zero_grad();
      const at::Tensor input = x.chunk(world_)[rank_];
      const at::Tensor output = stage == 1 ? (*model)->forward(input) : net->forward(input);
      torch::mse_loss(output, y.chunk(world_)[rank_]).backward();
      optimizer.step();
      for (const auto& p : net->parameters()) released = released && !p.grad().defined();
    }
    if (stage == 2) all_released_ = all_released_ && released;

    checks_.close_all(prefix + "parameters equal plain DDP's after 5 steps (1e-6)",
                      net->parameters(), plain_net->parameters(), 1e-6);
    // Closed forms: shards of ceil(232 / N) elements, rank r's from r * S;
    // the spare layer's 20 elements come last and never get state.
    int64_t elements = 0;
    for (const auto& p : net->parameters()) elements += p.numel();
    const int64_t trained = elements - net->spare->weight.numel() - net->spare->bias.numel();
    const int64_t shard = (elements + world_ - 1) / world_;
    const int64_t lo = rank_ * shard, hi = std::min(lo + shard, elements);
    const int64_t with_state = std::max<int64_t>(0, std::min(hi, trained) - lo);
    const int64_t owned = optimizer.shard_elements();
    checks_.check(prefix + "the state held is that of this rank's shard",
                  owned == std::max<int64_t>(0, hi - lo) &&
                      optimizer.state_bytes() == with_state * c.state_per_element,
                  std::to_string(optimizer.state_bytes()) + " bytes for " + std::to_string(owned) +
                      " elements; expected " + std::to_string(with_state * c.state_per_element) +
                      " bytes for " + std::to_string(std::max<int64_t>(0, hi - lo)) +
                      " elements, " + std::to_string(with_state) + " of them trained");
    at::Tensor total = torch::tensor({owned}, torch::kLong);
    group_->all_reduce(total, ReduceOp::kSum);
    checks_.check(prefix + "the shards cover every parameter element once",
                  total.item<int64_t>() == elements,
                  std::to_string(total.item<int64_t>()) + " owned, " + std::to_string(elements) +
                      " in the model");
    checks_.equal(prefix + "the parameter that never gets a gradient is left alone",
                  net->spare->weight.detach(), spare_before);
  }

  void releasedGradients() {
    checks_.check("stage 2: no full gradient is kept after step()", all_released_);
  }

  void badStage() {
    std::string message;
    try {
      ZeroNet net;
      ZeroRedundancyOptimizer optimizer(net->parameters(), optimizerCases()[0].factory,
                                        ZeroRedundancyOptimizerOptions().stage(3), group_);
    } catch (const ConfigError& e) {
      message = e.what();
    }
    checks_.check(
        "stage 3 is a ConfigError naming the stages",
        message.find("ZeroRedundancyOptimizer: stage is 3; it must be 1") != std::string::npos,
        "message: '" + message + "'");
  }

  int failed() const { return checks_.failed(); }

 private:
  std::shared_ptr<ProcessGroup> group_;
  int rank_;
  int world_;
  bool all_released_ = true;
  NamedChecks checks_;
};

}  // namespace

int checkZero(const std::shared_ptr<ProcessGroup>& group) {
  ZeroChecker checker(group);
  for (int stage : {1, 2}) {
    for (const OptimizerCase& c : optimizerCases()) checker.matchesPlainDdp(stage, c);
  }
  checker.releasedGradients();
  checker.badStage();
  return checker.failed();
}

}  // namespace ddp::testing

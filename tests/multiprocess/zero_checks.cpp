#include "multiprocess/zero_checks.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "common/named_checks.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/parallel/distributed_data_parallel.hpp"
#include "ddp/parallel/zero_redundancy_optimizer.hpp"
#include "multiprocess/zero_net.hpp"
#include "timeline/counting_group.hpp"

namespace ddp::testing {
namespace {

namespace nn = torch::nn;
namespace optim = torch::optim;

constexpr int64_t kZeroPerRank = 4;
constexpr int kZeroSteps = 5;
// Every parameter gets a gradient: 8x16, 16x16 and 16x4 layers, in buckets
// (under kTwoBucketsCapMb, from the last layer) of 68, 272 and 144 elements.
nn::Sequential three_layers() {
  return nn::Sequential(nn::Linear(8, 16), nn::Tanh(), nn::Linear(16, 16), nn::Tanh(),
                        nn::Linear(16, 4));
}

template <typename Call>
std::string message_of(Call call) {
  try {
    call();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "(no exception)";
}

std::pair<torch::Tensor, torch::Tensor> batch_of(int step, int world) {
  torch::manual_seed(600 + step);
  return {torch::randn({kZeroPerRank * world, 8}), torch::randn({kZeroPerRank * world, 4})};
}

struct OptimizerCase {
  std::string name;
  ZeroOptimizerFactory factory;
  int64_t state_per_element;  // bytes of state per float32 element
};

std::vector<OptimizerCase> optimizer_cases() {
  return {
      {zero_check::kSgdMomentum,
       zero_optimizer<optim::SGD>(optim::SGDOptions(0.05).momentum(0.9).weight_decay(1e-2)), 4},
      {zero_check::kAdam, zero_optimizer<optim::Adam>(optim::AdamOptions(1e-2).weight_decay(1e-2)),
       8},
      {zero_check::kAdamW,
       zero_optimizer<optim::AdamW>(optim::AdamWOptions(1e-2).weight_decay(1e-1)), 8},
  };
}

class ZeroChecker {
 public:
  explicit ZeroChecker(std::shared_ptr<ProcessGroup> group)
      : group_(std::move(group)), rank_(group_->rank()), world_(group_->size()) {}

  void matches_plain_ddp(int stage, const OptimizerCase& c, bool two_buckets = false) {
    using namespace zero_check;  // NOLINT(google-build-using-namespace)
    const std::string subject = at_stage(stage, two_buckets ? in_two_buckets(c.name) : c.name);
    // Plain DDP with the whole optimizer on every rank.
    torch::manual_seed(21);
    ZeroNet plain_net;
    DistributedDataParallel plain(
        plain_net, DistributedDataParallelOptions().find_unused_parameters(true), group_);
    auto plain_optimizer = c.factory(plain_net->parameters());
    for (int step = 0; step < kZeroSteps; ++step) {
      auto [x, y] = batch_of(step, world_);
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
                                      ZeroRedundancyOptimizerOptions().stage(stage).bucket_cap_mb(
                                          two_buckets ? kTwoBucketsCapMb : 25),
                                      group_);
    bool released = true;
    for (int step = 0; step < kZeroSteps; ++step) {
      auto [x, y] = batch_of(step, world_);
      optimizer.zero_grad();
      const at::Tensor input = x.chunk(world_)[rank_];
      const at::Tensor output = stage == 1 ? (*model)->forward(input) : net->forward(input);
      torch::mse_loss(output, y.chunk(world_)[rank_]).backward();
      optimizer.step();
      for (const auto& p : net->parameters()) released = released && !p.grad().defined();
    }
    if (stage == 2) all_released_ = all_released_ && released;

    checks_.close_all(check_name(subject, kParameters), net->parameters(), plain_net->parameters(),
                      1e-6);
    // Closed forms (zero_net_share): chunk r of each bucket.
    const std::vector<int64_t> buckets = zero_net_buckets(two_buckets);
    checks_.check(check_name(subject, kBuckets), optimizer.bucket_elements() == buckets,
                  std::to_string(optimizer.bucket_elements().size()) + " bucket(s), the first of " +
                      std::to_string(optimizer.bucket_elements().front()) + " elements");
    const ZeroNetShare share = zero_net_share(rank_, world_, buckets);
    const int64_t owned = optimizer.shard_elements();
    checks_.check(
        check_name(subject, kShardState),
        owned == share.owned && optimizer.state_bytes() == share.trained * c.state_per_element,
        std::to_string(optimizer.state_bytes()) + " bytes for " + std::to_string(owned) +
            " elements; expected " + std::to_string(share.trained * c.state_per_element) +
            " bytes for " + std::to_string(share.owned) + " elements, " +
            std::to_string(share.trained) + " of them trained");
    int64_t elements = 0;
    for (const auto& p : net->parameters()) elements += p.numel();
    at::Tensor total = torch::tensor({owned}, torch::kLong);
    group_->all_reduce(total, ReduceOp::kSum);
    checks_.check(check_name(subject, kShardsCover), total.item<int64_t>() == elements,
                  std::to_string(total.item<int64_t>()) + " owned, " + std::to_string(elements) +
                      " in the model");
    checks_.equal(check_name(subject, kSpareLeftAlone), net->spare->weight.detach(), spare_before);
  }

  // Stage 2 with two backward passes per step against plain DDP with the
  // first pass under no_sync(): both average the summed gradients.
  void accumulates_passes() {
    using namespace zero_check;                         // NOLINT(google-build-using-namespace)
    const auto factory = optimizer_cases()[1].factory;  // Adam
    torch::manual_seed(21);
    ZeroNet plain_net;
    DistributedDataParallel plain(
        plain_net, DistributedDataParallelOptions().find_unused_parameters(true), group_);
    auto plain_optimizer = factory(plain_net->parameters());
    torch::manual_seed(21);
    ZeroNet net;
    ZeroRedundancyOptimizer optimizer(net->parameters(), factory,
                                      ZeroRedundancyOptimizerOptions()
                                          .stage(2)
                                          .bucket_cap_mb(kTwoBucketsCapMb)
                                          .backward_passes_per_step(2),
                                      group_);
    bool kept = true;
    for (int step = 0; step < kZeroSteps; ++step) {
      auto [x, y] = batch_of(step, world_);
      const auto xs = x.chunk(world_)[rank_].chunk(2), ys = y.chunk(world_)[rank_].chunk(2);
      plain_optimizer->zero_grad();
      {
        auto no_sync = plain->no_sync();
        torch::mse_loss(plain->forward(xs[0]), ys[0]).backward();
      }
      torch::mse_loss(plain->forward(xs[1]), ys[1]).backward();
      plain_optimizer->step();

      optimizer.zero_grad();
      torch::mse_loss(net->forward(xs[0]), ys[0]).backward();
      kept = kept && net->out->weight.grad().defined() && net->hidden->weight.grad().defined();
      torch::mse_loss(net->forward(xs[1]), ys[1]).backward();
      optimizer.step();
    }
    checks_.check(check_name(kTwoPasses, kFirstPassKept), kept);
    checks_.close_all(check_name(kTwoPasses, kTwoPassesParameters), net->parameters(),
                      plain_net->parameters(), 1e-6);
  }

  // Counts the collectives ZeRO issues: the reduce-scatters of the last two
  // layers' buckets start before the first layer's gradient exists.
  void overlaps_backward() {
    using namespace zero_check;  // NOLINT(google-build-using-namespace)
    torch::manual_seed(5);
    nn::Sequential net = three_layers();
    auto counting = std::make_shared<CountingGroup>(group_);
    ZeroRedundancyOptimizer optimizer(
        net->parameters(), optimizer_cases()[0].factory,
        ZeroRedundancyOptimizerOptions().stage(2).bucket_cap_mb(kTwoBucketsCapMb), counting);
    // Counted from here: construction's agreement check has its own.
    const int64_t constructed = counting->issued();
    auto issued = [&] { return counting->issued() - constructed; };
    int64_t before_first_layer = -1;
    net[0]->as<nn::Linear>()->weight.register_hook(
        [&](const at::Tensor&) { before_first_layer = issued(); });
    checks_.check(check_name(kOverlap, kThreeBuckets),
                  optimizer.bucket_elements() == std::vector<int64_t>{68, 272, 144});
    auto [x, y] = batch_of(0, world_);
    optimizer.zero_grad();
    torch::mse_loss(net->forward(x.chunk(world_)[rank_]), y.chunk(world_)[rank_]).backward();
    const int64_t after_backward = issued();
    bool released = true;
    for (const auto& p : net->parameters()) released = released && !p.grad().defined();
    optimizer.step();
    checks_.check(check_name(kOverlap, kEarlyReduceScatters), before_first_layer == 2,
                  std::to_string(before_first_layer) + " issued");
    checks_.check(check_name(kOverlap, kReleasedAfterBackward), after_backward == 3 && released,
                  std::to_string(after_backward) + " issued, released " + std::to_string(released));
    // The all-reduce of which parameters got gradients: none alone, where
    // this rank's answer is everyone's (and would cost a wait for the GPU).
    const int64_t usage_exchanges = world_ == 1 ? 0 : 1;
    checks_.check(check_name(kOverlap, kStepCollectives),
                  issued() - after_backward == usage_exchanges + 3,
                  std::to_string(issued() - after_backward) + " issued, expected " +
                      std::to_string(usage_exchanges + 3));
  }

  void misuse_is_named() {
    torch::manual_seed(5);
    nn::Sequential net = three_layers();
    ZeroRedundancyOptimizer optimizer(net->parameters(), optimizer_cases()[0].factory,
                                      ZeroRedundancyOptimizerOptions().stage(2), group_);
    const at::Tensor x = torch::ones({2, 8});
    net->forward(x).sum().backward();
    const std::string twice = message_of([&] { net->forward(x).sum().backward(); });
    checks_.check(zero_check::kSecondBackward,
                  twice.find("was computed more than backward_passes_per_step = 1 time(s) before "
                             "step()") != std::string::npos,
                  "message: '" + twice + "'");
    const std::string zeroed = message_of([&] { optimizer.zero_grad(); });
    checks_.check(zero_check::kZeroGradMidway,
                  zeroed.find("zero_grad() after a backward pass whose gradients are already "
                              "being reduce-scattered") != std::string::npos,
                  "message: '" + zeroed + "'");
    optimizer.step();
    const std::string cap = message_of([&] {
      ZeroRedundancyOptimizer bad(net->parameters(), optimizer_cases()[0].factory,
                                  ZeroRedundancyOptimizerOptions().bucket_cap_mb(0), group_);
    });
    const std::string passes = message_of([&] {
      ZeroRedundancyOptimizer bad(net->parameters(), optimizer_cases()[0].factory,
                                  ZeroRedundancyOptimizerOptions().backward_passes_per_step(2),
                                  group_);
    });
    checks_.check(
        zero_check::kBadOptions,
        cap.find("ZeroRedundancyOptimizer: bucket_cap_mb is 0; it must be a positive number of "
                 "MiB") != std::string::npos &&
            passes.find("backward_passes_per_step is 2 at stage 1") != std::string::npos,
        "messages: '" + cap + "', '" + passes + "'");
  }

  void released_gradients() { checks_.check(zero_check::kNoFullGradientKept, all_released_); }

  void bad_stage() {
    std::string message;
    try {
      ZeroNet net;
      ZeroRedundancyOptimizer optimizer(net->parameters(), optimizer_cases()[0].factory,
                                        ZeroRedundancyOptimizerOptions().stage(3), group_);
    } catch (const ConfigError& e) {
      message = e.what();
    }
    checks_.check(
        zero_check::kBadStage,
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

int check_zero(const std::shared_ptr<ProcessGroup>& group) {
  ZeroChecker checker(group);
  for (int stage : zero_check::stages()) {
    for (const OptimizerCase& c : optimizer_cases()) checker.matches_plain_ddp(stage, c);
    checker.matches_plain_ddp(stage, optimizer_cases()[1], /*two_buckets=*/true);
  }
  checker.accumulates_passes();
  checker.overlaps_backward();
  checker.misuse_is_named();
  checker.released_gradients();
  checker.bad_stage();
  return checker.failed();
}

}  // namespace ddp::testing

#include "multiprocess/fsdp_paths_checks.hpp"

#include <torch/torch.h>

#include <functional>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/named_checks.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/device_mesh.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/parallel/fully_sharded_data_parallel.hpp"
#include "multiprocess/fsdp_models.hpp"
#include "multiprocess/fsdp_paths_models.hpp"

namespace ddp::testing {
namespace fsdp_paths {  // named: the unity build joins this file with others

using namespace fsdp_models;  // NOLINT(google-build-using-namespace)
namespace check = fsdp_paths_check;

constexpr int64_t kRows = 3;  // per rank
constexpr int kSteps = 4;

Tensor data(int step, int stream, int64_t rows, int64_t features) {
  torch::manual_seed(1000 * stream + step);
  return torch::randn({rows, features});
}

class PathsChecker {
 public:
  explicit PathsChecker(const std::shared_ptr<ProcessGroup>& group)
      : group_(group), rank_(group->rank()), world_(group->size()) {}

  int run() {
    direct_call();
    backward_exception();
    gradient_penalty();
    no_grad_branch();
    every_rank_skips();
    frozen_middle();
    forward_order();
    tie_with_root();
    return checks_.failed();
  }

 private:
  Tensor rows(const Tensor& whole) const { return whole.narrow(0, rank_ * kRows, kRows); }
  Tensor input(int step) const { return data(step, 1, world_ * kRows, 8); }
  Tensor target(int step) const { return data(step, 2, world_ * kRows, 8); }

  // One process on the whole batch of each step in `steps`.
  std::vector<Tensor> reference(nn::Module& model, const std::function<Tensor(const Tensor&)>& run,
                                const std::vector<int>& steps) {
    torch::optim::SGD optimizer(distinct(model.parameters()),
                                torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int step : steps) {
      optimizer.zero_grad();
      torch::mse_loss(run(input(step)), target(step)).backward();
      optimizer.step();
    }
    std::vector<Tensor> result;
    for (const auto& p : model.parameters()) result.push_back(p.detach().clone());
    return result;
  }

  static std::vector<Tensor> full(FullyShardedDataParallel& model) {
    std::vector<Tensor> result;
    for (const auto& item : model->full_parameters()) result.push_back(item.value());
    return result;
  }

  void direct_call() {
    for (int prefetch : {1, 0}) {
      torch::manual_seed(21);
      Blocks reference_model(3);
      const auto expected =
          reference(*reference_model, [&](const Tensor& x) { return reference_model(x); }, {0, 2});
      torch::manual_seed(21 + rank_);
      Blocks local(3);
      FullyShardedDataParallel model(local,
                                     FullyShardedDataParallelOptions()
                                         .wrap_policy(wrap_by_type<nn::LinearImpl>())
                                         .prefetch(prefetch),
                                     group_);
      torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
      std::string error;
      for (int step = 0; step < 3; ++step) {
        optimizer.zero_grad();
        local->direct = step == 1 ? 1 : -1;
        try {
          torch::mse_loss(model->forward(rows(input(step))), rows(target(step))).backward();
          optimizer.step();
        } catch (const ConfigError& e) {
          error = e.what();
        }
      }
      const bool named = error.find("'blocks.1'") != std::string::npos &&
                         error.find("ddp::sharded_call(block, x)") != std::string::npos;
      if (!named) {
        checks_.check(check::kDirectCall, false,
                      "prefetch " + std::to_string(prefetch) + ": " +
                          (error.empty() ? "no ConfigError" : "the error: " + error));
        return;
      }
      if (prefetch == 0) checks_.close_all(check::kDirectCall, full(model), expected, 1e-5);
    }
  }

  // Also with hybrid sharding (rows of one rank), whose all-reduces across
  // the rows are on their way when the exception comes.
  void backward_exception() {
    std::string problems;
    for (bool hybrid : {false, true}) problems += backward_exception(hybrid);
    checks_.check(check::kBackwardException, problems.empty(), problems);
  }

  // What went wrong, or nothing.
  std::string backward_exception(bool hybrid) {
    torch::manual_seed(22);
    Blocks reference_model(3);
    const auto expected =
        reference(*reference_model, [&](const Tensor& x) { return reference_model(x); }, {0, 2, 3});
    torch::manual_seed(22 + rank_);
    Blocks local(3);
    auto options = FullyShardedDataParallelOptions().wrap_policy(wrap_by_type<nn::LinearImpl>());
    if (hybrid) options.device_mesh(std::make_shared<DeviceMesh>(group_, world_, 1));
    FullyShardedDataParallel model(local, options, group_);
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    bool threw = false;
    for (int step = 0; step < kSteps; ++step) {
      optimizer.zero_grad();
      local->throw_in_backward = step == 1;
      try {
        torch::mse_loss(model->forward(rows(input(step))), rows(target(step))).backward();
        optimizer.step();
      } catch (const std::exception& e) {  // skip the batch
        threw = std::string(e.what()).find("a failing hook") != std::string::npos;
      }
    }
    const std::string way = hybrid ? "hybrid (rows of one rank): " : "";
    if (!threw) return way + "the hook never threw; ";
    const int64_t held = model->memory().gathered_bytes;
    if (held != 0) return way + std::to_string(held) + " bytes stay gathered; ";
    const double worst = worst_relative_error(full(model), expected);
    if (worst > 1e-5) return way + "max relative error " + std::to_string(worst) + "; ";
    return "";
  }

  void gradient_penalty() {
    auto make = [] {
      return nn::Sequential(nn::Linear(8, 12), nn::Tanh(), nn::Linear(12, 12), nn::Tanh(),
                            nn::Linear(12, 8));
    };
    auto loss_of = [](const Tensor& x, const std::function<Tensor(const Tensor&)>& run,
                      const Tensor& y) {
      const Tensor in = x.detach().requires_grad_(true);
      const Tensor out = run(in);
      const Tensor slope =
          torch::autograd::grad({out.sum()}, {in}, {}, /*retain_graph=*/true, /*create_graph=*/true)
              .at(0);
      return torch::mse_loss(out, y) + 0.1 * slope.pow(2).sum(1).mean();
    };
    torch::manual_seed(23);
    auto reference_model = make();
    torch::optim::SGD reference_optimizer(reference_model->parameters(),
                                          torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int step = 0; step < kSteps; ++step) {
      reference_optimizer.zero_grad();
      loss_of(
          input(step), [&](const Tensor& x) { return reference_model->forward(x); }, target(step))
          .backward();
      reference_optimizer.step();
    }
    torch::manual_seed(23 + rank_);
    FullyShardedDataParallel model(make(), group_);
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    std::string error;
    try {
      for (int step = 0; step < kSteps; ++step) {
        optimizer.zero_grad();
        loss_of(
            rows(input(step)), [&](const Tensor& x) { return model->forward(x); },
            rows(target(step)))
            .backward();
        optimizer.step();
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
    checks_.close_all(check::kGradientPenalty, error.empty() ? full(model) : std::vector<Tensor>{},
                      reference_model->parameters(), 1e-5, error.substr(0, 300));
  }

  void no_grad_branch() {
    torch::manual_seed(24 + rank_);
    Branchy local;
    FullyShardedDataParallel model(local,
                                   FullyShardedDataParallelOptions()
                                       .wrap_policy(wrap_by_type<nn::LinearImpl>())
                                       .find_unused_units(true),
                                   group_);
    torch::optim::AdamW optimizer(model->parameters(),
                                  torch::optim::AdamWOptions(0.01).weight_decay(0.1));
    {
      torch::NoGradGuard no_grad;
      local->take_branch = true;
      model->forward(rows(data(0, 1, world_ * kRows, 7)));
    }
    local->take_branch = false;
    for (int step = 1; step < kSteps; ++step) {
      optimizer.zero_grad();
      torch::mse_loss(model->forward(rows(data(step, 1, world_ * kRows, 7))),
                      rows(data(step, 2, world_ * kRows, 5)))
          .backward();
      optimizer.step();
    }
    // Rank 0's weights, which construction gave every rank.
    torch::manual_seed(24);
    Branchy initial;
    const auto after = model->full_parameters();
    checks_.check(check::kNoGradBranch,
                  torch::equal(after["branch.weight"], initial->branch->weight) &&
                      torch::equal(after["branch.bias"], initial->branch->bias),
                  "the branch moved");
  }

  void every_rank_skips() {
    torch::manual_seed(25);
    Branchy local;
    FullyShardedDataParallel model(
        local, FullyShardedDataParallelOptions().wrap_policy(wrap_by_type<nn::LinearImpl>()),
        group_);
    local->take_branch = false;
    std::string error;
    try {
      torch::mse_loss(model->forward(rows(data(0, 1, world_ * kRows, 7))),
                      rows(data(0, 2, world_ * kRows, 5)))
          .backward();
    } catch (const ConfigError& e) {
      error = e.what();
    }
    checks_.check(check::kEveryRankSkips,
                  error.find("'branch'") != std::string::npos &&
                      error.find("find_unused_units(true)") != std::string::npos,
                  error.empty() ? "no ConfigError" : error);
  }

  void frozen_middle() {
    auto make = [] {
      auto model = nn::Sequential(nn::Linear(8, 12), nn::Tanh(), nn::Linear(12, 12), nn::Tanh(),
                                  nn::Linear(12, 8));
      for (auto& p : model[2]->parameters()) p.set_requires_grad(false);
      return model;
    };
    torch::manual_seed(26);
    auto reference_model = make();
    const auto expected = reference(
        *reference_model, [&](const Tensor& x) { return reference_model->forward(x); }, {0, 1, 2});
    torch::manual_seed(26 + rank_);
    FullyShardedDataParallel model(make(), group_);
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int step = 0; step < 3; ++step) {
      optimizer.zero_grad();
      torch::mse_loss(model->forward(rows(input(step))), rows(target(step))).backward();
      optimizer.step();
    }
    const int64_t held = model->memory().gathered_bytes;
    if (held != 0) {
      checks_.check(check::kFrozenMiddle, false, std::to_string(held) + " bytes stay gathered");
      return;
    }
    checks_.close_all(check::kFrozenMiddle, full(model), expected, 1e-5);
  }

  void forward_order() {
    torch::manual_seed(27);
    Blocks reference_model(5);
    reference_model->reversed = true;
    const auto expected = reference(
        *reference_model, [&](const Tensor& x) { return reference_model(x); }, {0, 1, 2, 3});
    torch::manual_seed(27 + rank_);
    Blocks local(5);
    local->reversed = true;
    FullyShardedDataParallel model(
        local, FullyShardedDataParallelOptions().wrap_policy(wrap_by_type<nn::LinearImpl>()),
        group_);
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    int64_t peak = 0;
    for (int step = 0; step < kSteps; ++step) {
      if (step == 1) model->reset_peak_memory();  // the first forward records the order
      optimizer.zero_grad();
      torch::mse_loss(model->forward(rows(input(step))), rows(target(step))).backward();
      optimizer.step();
      peak = model->memory().peak_gathered_bytes;
    }
    // Two units' full parameters and one's full gradient, padded: 3 x 72
    // floats.
    const int64_t unit = (72 + world_ - 1) / world_ * world_ * 4;
    if (peak > 3 * unit) {
      checks_.check(check::kForwardOrder, false,
                    "peak " + std::to_string(peak) + " bytes, bound " + std::to_string(3 * unit));
      return;
    }
    checks_.close_all(check::kForwardOrder, full(model), expected, 1e-5);
  }

  void tie_with_root() {
    std::string error;
    try {
      FullyShardedDataParallel model(
          TiedAcross(),
          FullyShardedDataParallelOptions().wrap_policy(wrap_by_type<nn::EmbeddingImpl>()), group_);
    } catch (const ConfigError& e) {
      error = e.what();
    }
    checks_.check(check::kTieWithRoot,
                  error.find("'out.weight', outside every unit, is also parameter "
                             "'embed.weight' of unit 'embed'") != std::string::npos,
                  error.empty() ? "no ConfigError" : error);
  }

  std::shared_ptr<ProcessGroup> group_;
  int rank_;
  int world_;
  NamedChecks checks_;
};

}  // namespace fsdp_paths

int check_fsdp_paths(const std::shared_ptr<ProcessGroup>& group) {
  const int failed = fsdp_paths::PathsChecker(group).run();
  return failed + check_fsdp_mixed_precision_paths(group) + check_fsdp_between_steps_paths(group) +
         check_fsdp_unused_parameter_paths(group) + check_fsdp_shared_module_paths(group);
}

}  // namespace ddp::testing

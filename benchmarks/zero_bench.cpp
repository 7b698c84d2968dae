// zero_bench: one rank of benchmarks/zero_bench.sh. Trains a ~10 M-parameter
// MLP with Adam three ways in the same run: plain DistributedDataParallel
// (every rank holds all of Adam's state), DDP with ZeroRedundancyOptimizer
// stage 1, and the bare model with stage 2. Prints, on rank 0, a line per
// way: the optimizer-state bytes on each rank (the largest) and the median
// step time.

#include <torch/torch.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "ddp/ddp.hpp"

namespace {

namespace nn = torch::nn;

// `layers` square Linear layers of `width` with tanh between them (10 M
// parameters: 5 x 1414).
struct DeepMlpImpl : nn::Module {
  DeepMlpImpl(int64_t width, int layers) {
    for (int k = 0; k < layers; ++k) {
      linears.push_back(register_module("linear" + std::to_string(k), nn::Linear(width, width)));
    }
  }
  torch::Tensor forward(torch::Tensor x) {
    for (size_t k = 0; k < linears.size(); ++k) {
      x = linears[k]->forward(x);
      if (k + 1 < linears.size()) x = torch::tanh(x);
    }
    return x;
  }
  std::vector<nn::Linear> linears;
};
TORCH_MODULE(DeepMlp);

DeepMlp make_model(int64_t width, int layers) {
  torch::manual_seed(1);
  return DeepMlp(width, layers);
}

int64_t adam_state_bytes(torch::optim::Optimizer& optimizer) {
  int64_t bytes = 0;
  for (auto& entry : optimizer.state()) {
    auto& state = static_cast<torch::optim::AdamParamState&>(*entry.second);
    bytes += (state.exp_avg().numel() + state.exp_avg_sq().numel()) * 4;
  }
  return bytes;
}

struct Result {
  int64_t state_bytes = 0;
  double median_ms = 0;
};

template <typename Step>
double median_step_ms(int steps, ddp::ProcessGroup& group, Step&& step) {
  std::vector<double> times;
  for (int s = 0; s < steps; ++s) {
    group.barrier();
    const auto start = std::chrono::steady_clock::now();
    step();
    times.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
            .count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

int64_t largest_across_ranks(int64_t value, ddp::ProcessGroup& group) {
  at::Tensor t = torch::tensor({value}, torch::kLong);
  group.all_reduce(t, ddp::ReduceOp::kMax);
  return t.item<int64_t>();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ZeroRedundancyOptimizer against plain DDP with Adam; run zero_bench.sh"};
  int64_t width = 1414, batch = 16;
  int layers = 5, steps = 10;
  app.add_option("--width", width, "width of each square layer")->capture_default_str();
  app.add_option("--layers", layers, "number of layers")->capture_default_str();
  app.add_option("--batch", batch, "rows per rank and step")->capture_default_str();
  app.add_option("--steps", steps, "timed steps per way (after 2 untimed)")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(1);
  auto group = ddp::init();
  const int rank = group->rank(), world = group->size();
  const auto options = torch::optim::AdamOptions(1e-4);
  torch::manual_seed(100 + rank);
  const at::Tensor x = torch::randn({batch, width}), y = torch::randn({batch, width});

  int64_t parameters = 0;
  std::vector<std::pair<std::string, Result>> results;
  {
    DeepMlp net = make_model(width, layers);
    for (const auto& p : net->parameters()) parameters += p.numel();
    ddp::DistributedDataParallel model(net, group);
    torch::optim::Adam optimizer(net->parameters(), options);
    auto step = [&] {
      optimizer.zero_grad();
      torch::mse_loss(model->forward(x), y).backward();
      optimizer.step();
    };
    step(), step();
    Result r;
    r.median_ms = median_step_ms(steps, *group, step);
    r.state_bytes = largest_across_ranks(adam_state_bytes(optimizer), *group);
    results.emplace_back("DDP + Adam", r);
  }
  for (int stage : {1, 2}) {
    DeepMlp net = make_model(width, layers);
    std::shared_ptr<ddp::DistributedDataParallel> model;
    if (stage == 1) model = std::make_shared<ddp::DistributedDataParallel>(net, group);
    ddp::ZeroRedundancyOptimizer optimizer(
        net->parameters(), ddp::zero_optimizer<torch::optim::Adam>(options),
        ddp::ZeroRedundancyOptimizerOptions().stage(stage), group);
    auto step = [&] {
      optimizer.zero_grad();
      const at::Tensor out = stage == 1 ? (*model)->forward(x) : net->forward(x);
      torch::mse_loss(out, y).backward();
      optimizer.step();
    };
    step(), step();
    Result r;
    r.median_ms = median_step_ms(steps, *group, step);
    r.state_bytes = largest_across_ranks(optimizer.state_bytes(), *group);
    results.emplace_back(stage == 1 ? "DDP + ZeRO-1 Adam" : "ZeRO-2 Adam", r);
  }
  if (rank == 0) {
    for (const auto& [name, r] : results) {
      std::printf("%-5d %-10lld %-18s %12lld %10.1f\n", world, static_cast<long long>(parameters),
                  name.c_str(), static_cast<long long>(r.state_bytes), r.median_ms);
    }
  }
  return 0;
}

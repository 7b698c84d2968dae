// DistributedDataParallel at world size 1 (Note [Alone] in
// src/parallel/distributed_data_parallel/reducer.cpp): with the default reduction a
// step issues no collective, and the weights are bit-identical to the path
// every rank takes at larger world sizes and to the bare model.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <string>
#include <vector>

#include "ddp/comm/init.hpp"
#include "ddp/parallel/comm_hook.hpp"
#include "ddp/parallel/distributed_data_parallel.hpp"
#include "timeline/counting_group.hpp"

namespace ddp::testing {
namespace {

// Four layers and a branch that only even steps use; caps of about 1 KiB
// give it several buckets.
struct BranchyImpl : torch::nn::Module {
  torch::nn::Linear a{register_module("a", torch::nn::Linear(12, 16))};
  torch::nn::Linear b{register_module("b", torch::nn::Linear(16, 16))};
  torch::nn::Linear c{register_module("c", torch::nn::Linear(16, 8))};
  torch::nn::Linear side{register_module("side", torch::nn::Linear(16, 8))};
  torch::nn::Linear d{register_module("d", torch::nn::Linear(8, 3))};
  bool use_side = true;
  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(b(torch::relu(a(x))));
    torch::Tensor y = c(x);
    if (use_side) y = y + side(x);
    return d(torch::tanh(y));
  }
};
TORCH_MODULE(Branchy);

DistributedDataParallelOptions small_buckets() {
  return DistributedDataParallelOptions().bucket_cap_mb(0.001).first_bucket_cap_mb(0.0005);
}

struct Trained {
  std::vector<at::Tensor> parameters;
  std::vector<at::Tensor> gradients;
  std::vector<int64_t> collectives_per_step;
};

enum class Mode { kBare, kShortcut, kFullPath };

// Five steps of SGD with momentum; with `skip_side`, odd steps leave the
// side branch unused; with `accumulate`, each step adds a no_sync pass.
Trained train(Mode mode, DistributedDataParallelOptions options, bool skip_side = false,
              bool accumulate = false) {
  torch::manual_seed(11);
  Branchy net;
  auto group =
      std::make_shared<CountingGroup>(init(InitOptions().backend("gloo").rank(0).world_size(1)));
  std::unique_ptr<DistributedDataParallel> model;
  if (mode != Mode::kBare) {
    model = std::make_unique<DistributedDataParallel>(
        net, options.single_process_shortcut(mode == Mode::kShortcut), group);
  }
  torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
  auto pass = [&](const torch::Tensor& x, const torch::Tensor& y) {
    const torch::Tensor out = model ? (*model)->forward(x) : net->forward(x);
    torch::mse_loss(out, y).backward();
  };
  Trained run;
  for (int step = 0; step < 5; ++step) {
    torch::manual_seed(100 + step);
    const torch::Tensor x = torch::randn({6, 12});
    const torch::Tensor y = torch::randn({6, 3});
    net->use_side = !(skip_side && step % 2 == 1);
    const int64_t before = group->issued();
    optimizer.zero_grad();
    if (accumulate) {
      if (model) {
        auto guard = (*model)->no_sync();
        pass(x * 0.5, y);
      } else {
        pass(x * 0.5, y);
      }
    }
    pass(x, y);
    optimizer.step();
    run.collectives_per_step.push_back(group->issued() - before);
  }
  for (const auto& p : net->parameters()) {
    run.parameters.push_back(p.detach().clone());
    run.gradients.push_back(p.grad().defined() ? p.grad().clone() : at::Tensor());
  }
  return run;
}

void expect_bit_identical(const Trained& got, const Trained& expected, const std::string& what) {
  ASSERT_EQ(got.parameters.size(), expected.parameters.size());
  for (size_t i = 0; i < got.parameters.size(); ++i) {
    EXPECT_TRUE(torch::equal(got.parameters[i], expected.parameters[i]))
        << what << ": parameter " << i << " differs by "
        << (got.parameters[i] - expected.parameters[i]).abs().max().item<double>();
    ASSERT_EQ(got.gradients[i].defined(), expected.gradients[i].defined()) << what << ": " << i;
    if (got.gradients[i].defined()) {
      EXPECT_TRUE(torch::equal(got.gradients[i], expected.gradients[i]))
          << what << ": gradient " << i;
    }
  }
}

struct Case {
  std::string name;
  DistributedDataParallelOptions options;
  bool skip_side = false;
  bool accumulate = false;
};

std::vector<Case> cases() {
  return {
      {"default", small_buckets()},
      {"gradient_as_bucket_view", small_buckets().gradient_as_bucket_view(true)},
      {"delay_allreduce", small_buckets().delay_allreduce(true)},
      {"static_graph", small_buckets().static_graph(true)},
      {"find_unused_parameters", small_buckets().find_unused_parameters(true), true},
      {"no_sync", small_buckets(), false, true},
      {"no_sync bucket view", small_buckets().gradient_as_bucket_view(true), false, true},
  };
}

TEST(DdpAlone, StepsIssueNoCollectiveAndMatchTheFullPathBitForBit) {
  for (const Case& c : cases()) {
    SCOPED_TRACE(c.name);
    const Trained bare = train(Mode::kBare, c.options, c.skip_side, c.accumulate);
    const Trained alone = train(Mode::kShortcut, c.options, c.skip_side, c.accumulate);
    const Trained full = train(Mode::kFullPath, c.options, c.skip_side, c.accumulate);
    expect_bit_identical(alone, full, "shortcut against the full path");
    expect_bit_identical(alone, bare, "shortcut against the bare model");
    for (size_t step = 0; step < alone.collectives_per_step.size(); ++step) {
      EXPECT_EQ(alone.collectives_per_step[step], 0) << "step " << step;
      EXPECT_GE(full.collectives_per_step[step], 2) << "step " << step;  // several buckets
    }
  }
}

// A comm hook changes values even alone (16 bits on the wire), so it runs.
TEST(DdpAlone, ACommHookStillRuns) {
  const Trained bare = train(Mode::kBare, small_buckets());
  const Trained hooked = train(Mode::kShortcut, small_buckets().comm_hook(fp16_compress_hook()));
  for (int64_t count : hooked.collectives_per_step) EXPECT_GE(count, 2);
  bool differs = false;
  for (size_t i = 0; i < bare.parameters.size(); ++i) {
    differs = differs || !torch::equal(bare.parameters[i], hooked.parameters[i]);
  }
  EXPECT_TRUE(differs) << "fp16 compression at world size 1 left every weight bit-identical";
}

}  // namespace
}  // namespace ddp::testing

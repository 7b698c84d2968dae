// DataParallel with k = 1, 2, 3 CPU replicas (the device kCPU repeated):
// training equals one module on the whole batch, batch norm follows
// PyTorch's DataParallel buffer semantics, a replica's exception reaches the
// caller, and small batches use fewer replicas.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "ddp/base/errors.hpp"
#include "ddp/parallel/data_parallel.hpp"

namespace ddp::testing {
namespace {

namespace nn = torch::nn;

struct MlpImpl : nn::Cloneable<MlpImpl> {
  MlpImpl() { reset(); }
  void reset() override {
    fc1 = register_module("fc1", nn::Linear(6, 16));
    fc2 = register_module("fc2", nn::Linear(16, 3));
  }
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::tanh(fc1(x))); }
  nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Mlp);

struct BnNetImpl : nn::Cloneable<BnNetImpl> {
  BnNetImpl() { reset(); }
  void reset() override {
    fc1 = register_module("fc1", nn::Linear(6, 16));
    bn = register_module("bn", nn::BatchNorm1d(16));
    fc2 = register_module("fc2", nn::Linear(16, 3));
  }
  torch::Tensor forward(torch::Tensor x) { return fc2(torch::relu(bn(fc1(x)))); }
  nn::Linear fc1{nullptr}, fc2{nullptr};
  nn::BatchNorm1d bn{nullptr};
};
TORCH_MODULE(BnNet);

// Throws from forward when its chunk holds the value 999.
struct PoisonNetImpl : nn::Cloneable<PoisonNetImpl> {
  PoisonNetImpl() { reset(); }
  void reset() override { fc = register_module("fc", nn::Linear(6, 3)); }
  torch::Tensor forward(torch::Tensor x) {
    if ((x == 999).any().item<bool>()) throw std::runtime_error("poisoned sample in this chunk");
    return fc(x);
  }
  nn::Linear fc{nullptr};
};
TORCH_MODULE(PoisonNet);

DataParallelOptions cpu_replicas(int k) {
  return DataParallelOptions().devices(std::vector<c10::Device>(k, c10::Device(c10::kCPU)));
}

std::pair<torch::Tensor, torch::Tensor> batch(int step, int64_t rows) {
  torch::manual_seed(100 + step);
  return {torch::randn({rows, 6}), torch::randn({rows, 3})};
}

void expect_all_close(const std::vector<torch::Tensor>& got,
                      const std::vector<torch::Tensor>& expected, const std::string& what) {
  ASSERT_EQ(got.size(), expected.size()) << what;
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_TRUE(torch::allclose(got[i], expected[i], 1e-5, 1e-6))
        << what << " #" << i << " differs by " << (got[i] - expected[i]).abs().max().item<double>();
  }
}

enum class Api { kForward, kForwardBackward, kBalanced };

struct Case {
  int replicas;
  Api api;
};

class DataParallelTraining : public ::testing::TestWithParam<Case> {};

// A batch of 10 rows splits 10 (k=1), 5+5 (k=2), 4+4+2 (k=3).
TEST_P(DataParallelTraining, TrainsLikeOneModuleOnTheWholeBatch) {
  const auto [k, api] = GetParam();
  torch::manual_seed(1);
  Mlp primary;
  torch::manual_seed(1);
  Mlp reference;
  DataParallel model(primary, cpu_replicas(k).balanced_memory(api == Api::kBalanced));
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD reference_optimizer(reference->parameters(),
                                        torch::optim::SGDOptions(0.1).momentum(0.9));
  const auto first_replica = model->replica(k - 1).get();
  for (int step = 0; step < 4; ++step) {
    auto [x, y] = batch(step, 10);
    optimizer.zero_grad();
    torch::Tensor loss;
    if (api == Api::kForward) {
      loss = torch::mse_loss(model->forward(x), y);
      loss.backward();
    } else {
      loss =
          model->forward_backward(x, y, [](const torch::Tensor& out, const torch::Tensor& target) {
            return torch::mse_loss(out, target);
          });
    }
    reference_optimizer.zero_grad();
    torch::Tensor expected_loss = torch::mse_loss(reference->forward(x), y);
    expected_loss.backward();
    expect_all_close({loss.detach()}, {expected_loss.detach()}, "loss");
    expect_all_close({primary->fc1->weight.grad(), primary->fc2->bias.grad()},
                     {reference->fc1->weight.grad(), reference->fc2->bias.grad()}, "gradients");
    optimizer.step();
    reference_optimizer.step();
    EXPECT_EQ(model->replicas_used(), static_cast<size_t>(k));
  }
  expect_all_close(primary->parameters(), reference->parameters(), "parameters after 4 steps");
  EXPECT_EQ(model->replica(k - 1).get(), first_replica) << "replicas are kept across steps";
  EXPECT_EQ(model->replica(0).get(), primary.ptr().get()) << "replica 0 is the wrapped module";
  for (const auto& p : model->replica(k - 1)->parameters()) {
    if (k > 1) EXPECT_FALSE(p.grad().defined()) << "a replica's gradient was left behind";
  }
}

INSTANTIATE_TEST_SUITE_P(DataParallel, DataParallelTraining,
                         ::testing::Values(Case{1, Api::kForward}, Case{2, Api::kForward},
                                           Case{3, Api::kForward}, Case{2, Api::kForwardBackward},
                                           Case{3, Api::kForwardBackward}, Case{1, Api::kBalanced},
                                           Case{2, Api::kBalanced}, Case{3, Api::kBalanced}),
                         [](const auto& info) {
                           const char* api = info.param.api == Api::kForward ? "Forward"
                                             : info.param.api == Api::kForwardBackward
                                                 ? "ForwardBackward"
                                                 : "BalancedMemory";
                           return std::string(api) + "K" + std::to_string(info.param.replicas);
                         });

// Note [A Sequential in DataParallel]: a torch::nn::Sequential is wrapped as
// it is; its entries are the ones the replicas copy, and its own parameters
// (the same tensors) get the whole batch's gradient.
TEST(DataParallelSequential, TrainsLikeTheSequentialOnTheWholeBatch) {
  auto make = [] {
    torch::manual_seed(3);
    return nn::Sequential(nn::Linear(6, 16), nn::Tanh(), nn::Linear(16, 3));
  };
  nn::Sequential primary = make(), reference = make();
  DataParallel model(primary, cpu_replicas(3));
  EXPECT_EQ(model->named_parameters().keys(),
            (std::vector<std::string>{"module.0.weight", "module.0.bias", "module.2.weight",
                                      "module.2.bias"}));
  torch::optim::SGD optimizer(primary->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD reference_optimizer(reference->parameters(),
                                        torch::optim::SGDOptions(0.1).momentum(0.9));
  for (int step = 0; step < 3; ++step) {
    auto [x, y] = batch(step, 10);
    optimizer.zero_grad();
    torch::mse_loss(model->forward(x), y).backward();
    optimizer.step();
    reference_optimizer.zero_grad();
    torch::mse_loss(reference->forward(x), y).backward();
    reference_optimizer.step();
    EXPECT_EQ(model->replicas_used(), 3u);
  }
  expect_all_close(primary->parameters(), reference->parameters(), "parameters after 3 steps");
}

// PyTorch's DataParallel semantics for batch norm: each replica normalizes
// with its own chunk's statistics, and only replica 0's (the primary's,
// chunk 0's) running statistics are kept. The reference does exactly that
// with one module: every chunk forward, the statistics of chunks 1.. undone.
class DataParallelBatchNorm : public ::testing::TestWithParam<int> {};

TEST_P(DataParallelBatchNorm, ChunkStatisticsAndReplicaZerosRunningStatistics) {
  const int k = GetParam();
  torch::manual_seed(2);
  BnNet primary;
  torch::manual_seed(2);
  BnNet reference;
  DataParallel model(primary, cpu_replicas(k));
  torch::optim::SGD optimizer(model->parameters(), 0.05);
  torch::optim::SGD reference_optimizer(reference->parameters(), 0.05);
  for (int step = 0; step < 3; ++step) {
    auto [x, y] = batch(step, 12);
    optimizer.zero_grad();
    torch::mse_loss(model->forward(x), y).backward();
    optimizer.step();

    reference_optimizer.zero_grad();
    std::vector<torch::Tensor> outputs, after_first_chunk;
    for (const auto& chunk : x.chunk(k, 0)) {
      outputs.push_back(reference->forward(chunk));
      if (outputs.size() == 1) {
        for (const auto& b : reference->buffers()) after_first_chunk.push_back(b.clone());
      }
    }
    torch::mse_loss(torch::cat(outputs, 0), y).backward();
    reference_optimizer.step();
    {
      // Only after backward: batch norm's backward reads the statistics.
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < after_first_chunk.size(); ++i) {
        reference->buffers()[i].copy_(after_first_chunk[i]);
      }
    }
  }
  expect_all_close(primary->parameters(), reference->parameters(), "parameters");
  expect_all_close(primary->buffers(), reference->buffers(), "running statistics");
  EXPECT_EQ(primary->bn->num_batches_tracked.item<int64_t>(), 3);
  if (k > 1) {
    // Replica 1 updated its own statistics from chunk 1; they are not the
    // primary's (and are replaced at the next forward).
    auto replica_bn = model->replica(1)->named_buffers()["bn.running_mean"];
    EXPECT_FALSE(torch::allclose(replica_bn, primary->bn->running_mean));
  }
  // Eval mode uses the running statistics: exactly one module's output.
  model->eval();
  reference->eval();
  torch::NoGradGuard no_grad;
  auto [x, y] = batch(9, 7);
  expect_all_close({model->forward(x)}, {reference->forward(x)}, "eval output");
}

INSTANTIATE_TEST_SUITE_P(DataParallel, DataParallelBatchNorm, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return "K" + std::to_string(info.param); });

TEST(DataParallelErrors, ExceptionInOneReplicaReachesTheCallerNamingIt) {
  for (bool balanced : {false, true}) {
    torch::manual_seed(3);
    PoisonNet primary;
    torch::manual_seed(3);
    PoisonNet reference;
    DataParallel model(primary, cpu_replicas(3).balanced_memory(balanced));
    auto loss_fn = [](const torch::Tensor& out, const torch::Tensor& target) {
      return torch::mse_loss(out, target);
    };
    for (int poisoned_replica : {2, 0}) {
      auto [x, y] = batch(0, 9);  // chunks of 3 rows
      x[3 * poisoned_replica + 1][2] = 999;
      try {
        model->forward_backward(x, y, loss_fn);
        FAIL() << "no exception";
      } catch (const Error& e) {
        const std::string expected =
            "DataParallel: replica " + std::to_string(poisoned_replica) + " (on cpu) failed in " +
            (balanced ? "forward_backward" : "forward") + ": poisoned sample in this chunk";
        EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
      }
    }
    // The workers survive: the next step runs and is right.
    model->zero_grad();
    auto [x, y] = batch(1, 9);
    model->forward_backward(x, y, loss_fn);
    torch::mse_loss(reference->forward(x), y).backward();
    expect_all_close({primary->fc->weight.grad()}, {reference->fc->weight.grad()},
                     balanced ? "balanced step after the failures" : "step after the failures");
  }
}

TEST(DataParallelErrors, MisuseIsReportedClearly) {
  DataParallel model(Mlp(), cpu_replicas(2));
  EXPECT_THROW(model->forward(torch::empty({0, 6})), InvalidArgumentError);
  EXPECT_THROW(model->forward(torch::tensor(1.0)), InvalidArgumentError);
  auto mse = [](const torch::Tensor& out, const torch::Tensor& target) {
    return torch::mse_loss(out, target);
  };
  EXPECT_THROW(model->forward_backward(torch::randn({4, 6}), torch::randn({3, 3}), mse),
               InvalidArgumentError);
  auto per_sample = [](const torch::Tensor& out, const torch::Tensor& target) {
    return (out - target).pow(2).sum(1);
  };
  EXPECT_THROW(model->forward_backward(torch::randn({4, 6}), torch::randn({4, 3}), per_sample),
               InvalidArgumentError);
  {
    torch::NoGradGuard no_grad;
    EXPECT_THROW(model->forward_backward(torch::randn({4, 6}), torch::randn({4, 3}), mse),
                 InvalidArgumentError);
  }
  try {
    DataParallel misplaced(Mlp(), DataParallelOptions().devices({c10::Device("cuda:0")}));
    FAIL() << "a CPU module was accepted for cuda:0";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("'fc1.weight' is on cpu but the module must live on "
                                         "the first device, cuda:0"),
              std::string::npos)
        << e.what();
  }
  struct PlainImpl : nn::Module {
    PlainImpl() { register_module("fc", nn::Linear(2, 2)); }
    torch::Tensor forward(torch::Tensor x) { return x; }
  };
  try {
    DataParallel not_cloneable(std::make_shared<PlainImpl>(), cpu_replicas(2));
    FAIL() << "a module without clone() was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("derive the module from torch::nn::Cloneable"),
              std::string::npos)
        << e.what();
  }
}

TEST(DataParallelSmallBatch, FewerChunksThanDevicesUseFewerReplicas) {
  torch::manual_seed(4);
  Mlp primary;
  DataParallel model(primary, cpu_replicas(3));
  torch::Tensor two = torch::randn({2, 6});
  expect_all_close({model->forward(two)}, {primary->forward(two)}, "batch of 2 on 3 replicas");
  EXPECT_EQ(model->replicas_used(), 2u);

  DataParallel four(primary, cpu_replicas(4));
  torch::Tensor five = torch::randn({5, 6});  // chunk(4) of 5 rows: 2, 2, 1
  torch::Tensor target = torch::randn({5, 3});
  primary->zero_grad();
  torch::mse_loss(four->forward(five), target).backward();
  EXPECT_EQ(four->replicas_used(), 3u);
  std::vector<torch::Tensor> grads;
  for (const auto& p : primary->parameters()) grads.push_back(p.grad().clone());
  primary->zero_grad();
  torch::mse_loss(primary->forward(five), target).backward();
  std::vector<torch::Tensor> expected;
  for (const auto& p : primary->parameters()) expected.push_back(p.grad().clone());
  expect_all_close(grads, expected, "gradients of a batch of 5 on 4 replicas");
}

TEST(DataParallelReplicas, TwoForwardsThenOneBackwardAndInference) {
  torch::manual_seed(5);
  Mlp primary;
  torch::manual_seed(5);
  Mlp reference;
  DataParallel model(primary, cpu_replicas(3));
  auto [x1, y1] = batch(1, 9);
  auto [x2, y2] = batch(2, 9);
  (torch::mse_loss(model->forward(x1), y1) + torch::mse_loss(model->forward(x2), y2)).backward();
  (torch::mse_loss(reference->forward(x1), y1) + torch::mse_loss(reference->forward(x2), y2))
      .backward();
  std::vector<torch::Tensor> got, expected;
  for (const auto& p : primary->parameters()) got.push_back(p.grad());
  for (const auto& p : reference->parameters()) expected.push_back(p.grad());
  expect_all_close(got, expected, "gradients of two forwards, one backward");

  // An update of the primary reaches the replicas at the next forward.
  {
    torch::NoGradGuard no_grad;
    for (auto& p : primary->parameters()) p.mul_(0.5);
    for (auto& p : reference->parameters()) p.mul_(0.5);
    expect_all_close({model->forward(x1)}, {reference->forward(x1)}, "inference after an update");
  }
  for (const auto& p : model->replica(2)->parameters()) EXPECT_FALSE(p.grad().defined());
}

TEST(DataParallelReplicas, ParametersFrozenAfterWrappingGetNoGradient) {
  torch::manual_seed(6);
  Mlp primary;
  torch::manual_seed(6);
  Mlp reference;
  DataParallel model(primary, cpu_replicas(2));
  primary->fc1->weight.requires_grad_(false);
  reference->fc1->weight.requires_grad_(false);
  auto [x, y] = batch(3, 8);
  torch::mse_loss(model->forward(x), y).backward();
  torch::mse_loss(reference->forward(x), y).backward();
  EXPECT_FALSE(primary->fc1->weight.grad().defined());
  expect_all_close({primary->fc1->bias.grad(), primary->fc2->weight.grad()},
                   {reference->fc1->bias.grad(), reference->fc2->weight.grad()},
                   "gradients of the parameters still trained");
}

}  // namespace
}  // namespace ddp::testing

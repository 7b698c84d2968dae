// ddp::nn::checkpoint (issue #58, what to build point 2), in one process:
// gradients bit for bit those without it, dropout's masks drawn again,
// fewer bytes held between forward and backward, an outer autograd::grad
// and a gradient penalty through it, and each mistake a named error.

#include <gtest/gtest.h>
#include <malloc.h>
#include <torch/torch.h>

#include <iostream>
#include <limits>
#include <string>
#include <vector>

#include "ddp/base/errors.hpp"
#include "ddp/nn/checkpoint.hpp"

namespace {

namespace nn = torch::nn;
using torch::Tensor;

constexpr int64_t kWidth = 32;
constexpr int64_t kLength = 16;
constexpr int64_t kBatch = 4;

// A pre-norm transformer block: causal attention and an MLP, with dropout.
struct BlockImpl : nn::Module {
  explicit BlockImpl(int64_t width)
      : norm1(register_module("norm1", nn::LayerNorm(nn::LayerNormOptions({width})))),
        attention(register_module("attention", nn::MultiheadAttention(width, 4))),
        norm2(register_module("norm2", nn::LayerNorm(nn::LayerNormOptions({width})))),
        up(register_module("up", nn::Linear(width, 4 * width))),
        down(register_module("down", nn::Linear(4 * width, width))),
        dropout(register_module("dropout", nn::Dropout(0.2))) {}
  Tensor forward(const Tensor& x) {  // (length, batch, width)
    const int64_t length = x.size(0);
    const Tensor causal =
        torch::full({length, length}, -std::numeric_limits<float>::infinity()).triu(1);
    const Tensor h = norm1(x);
    const Tensor a = x + dropout(std::get<0>(attention->forward(h, h, h, Tensor(), false, causal)));
    return a + dropout(down(torch::gelu(up(norm2(a)))));
  }
  nn::LayerNorm norm1, norm2;
  nn::MultiheadAttention attention;
  nn::Linear up, down;
  nn::Dropout dropout;
};
TORCH_MODULE(Block);

struct Stack {
  explicit Stack(int blocks, int64_t width = kWidth) {
    torch::manual_seed(7);
    for (int b = 0; b < blocks; ++b) layers.push_back(Block(width));
  }
  Tensor forward(Tensor h, bool checkpointed) {
    for (auto& block : layers) h = checkpointed ? ddp::nn::checkpoint(block, h) : block(h);
    return h;
  }
  std::vector<Tensor> parameters() const {
    std::vector<Tensor> result;
    for (const auto& block : layers) {
      for (const auto& p : block->parameters()) result.push_back(p);
    }
    return result;
  }
  std::vector<Block> layers;
};

Tensor batch(int64_t width = kWidth, int64_t length = kLength) {
  torch::manual_seed(11);
  return torch::randn({length, kBatch, width});
}

struct Result {
  Tensor loss, input_grad, after;  // after: a draw once backward is done
  std::vector<Tensor> grads;
};

Result train(bool checkpointed) {
  Stack stack(3);
  const Tensor x = batch().requires_grad_(true);
  torch::manual_seed(23);  // dropout's stream
  Result result;
  result.loss = stack.forward(x, checkpointed).pow(2).mean();
  result.loss.backward();
  result.after = torch::rand({4});
  result.input_grad = x.grad();
  for (const auto& p : stack.parameters()) result.grads.push_back(p.grad());
  return result;
}

TEST(NnCheckpoint, GradientsEqualRunningWithoutItBitForBitDropoutIncluded) {
  const Result plain = train(false), checkpointed = train(true);
  ASSERT_TRUE(torch::equal(plain.loss, checkpointed.loss));
  ASSERT_TRUE(torch::equal(plain.input_grad, checkpointed.input_grad));
  ASSERT_EQ(plain.grads.size(), checkpointed.grads.size());
  for (size_t i = 0; i < plain.grads.size(); ++i) {
    ASSERT_TRUE(plain.grads[i].defined() && checkpointed.grads[i].defined()) << "parameter " << i;
    EXPECT_TRUE(torch::equal(plain.grads[i], checkpointed.grads[i])) << "parameter " << i;
  }
  // The recompute drew the masks again from the saved state and put the
  // stream back: the program's next draw is the one without checkpointing.
  EXPECT_TRUE(torch::equal(plain.after, checkpointed.after));
}

// Bytes malloc holds (LibTorch's CPU allocator is malloc's).
size_t bytes_in_use() {
  const struct mallinfo2 info = mallinfo2();
  return info.uordblks + info.hblkhd;
}

TEST(NnCheckpoint, HoldsOnlyEachBlocksInputBetweenForwardAndBackward) {
  constexpr int kBlocks = 4;
  constexpr int64_t kWide = 128, kLong = 128;
  auto held = [&](bool checkpointed) {
    Stack stack(kBlocks, kWide);
    const Tensor x = batch(kWide, kLong).requires_grad_(true);
    const size_t before = bytes_in_use();
    Tensor loss = stack.forward(x, checkpointed).pow(2).mean();
    const size_t during = bytes_in_use();
    loss.backward();
    return static_cast<double>(during - before);
  };
  const double plain = held(false), checkpointed = held(true);
  const double activation = kLong * kBatch * kWide * sizeof(float);  // one block's input
  std::cout << "held between forward and backward: " << plain << " bytes plain, " << checkpointed
            << " checkpointed (one block's input: " << activation << ")\n";
  // Each block's input is kept, and the output and the loss's own: about
  // kBlocks + 2 activations, against the whole graph's.
  EXPECT_LE(checkpointed, (kBlocks + 3) * activation)
      << "checkpointed " << checkpointed << " bytes, plain " << plain;
  EXPECT_GE(plain, 4 * checkpointed) << "checkpointed " << checkpointed << " bytes";
}

TEST(NnCheckpoint, OuterAutogradGradAndAGradientPenaltyMatch) {
  auto run = [](bool checkpointed) {
    Stack stack(2);
    stack.layers[0]->eval();  // no dropout, so that both passes see the same function
    stack.layers[1]->eval();
    const Tensor x = batch().requires_grad_(true);
    const Tensor y = stack.forward(x, checkpointed);
    const Tensor dx = torch::autograd::grad({y.pow(2).sum()}, {x}, {}, true, true)[0];
    const Tensor penalty = dx.pow(2).sum();
    penalty.backward();
    return std::vector<Tensor>{dx, stack.layers[0]->up->weight.grad(), x.grad()};
  };
  const auto plain = run(false), checkpointed = run(true);
  for (size_t i = 0; i < plain.size(); ++i) {
    ASSERT_TRUE(checkpointed[i].defined()) << i;
    // The second backward sums the same terms in another order: equal to
    // fp32's rounding, relative to the tensor's largest element.
    const double scale = plain[i].abs().max().item<double>();
    const double off = (plain[i] - checkpointed[i]).abs().max().item<double>();
    EXPECT_LE(off, 1e-5 * scale) << i << ": " << off << " off, largest " << scale;
  }
}

TEST(NnCheckpoint, FrozenParametersGetNoGradientAndUnderNoGradItSimplyRuns) {
  Block block(kWidth);
  block->up->weight.set_requires_grad(false);
  const Tensor x = batch().requires_grad_(true);
  ddp::nn::checkpoint(block, x).sum().backward();
  EXPECT_FALSE(block->up->weight.grad().defined());
  EXPECT_TRUE(block->down->weight.grad().defined());
  torch::NoGradGuard no_grad;
  block->eval();
  EXPECT_TRUE(torch::equal(ddp::nn::checkpoint(block, x), block(x)));
}

TEST(NnCheckpoint, AParameterGivenTwiceGetsItsGradientOnce) {
  nn::Linear linear(4, 4);
  const Tensor x = torch::randn({2, 4});
  ddp::nn::CheckpointedFunction run = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{torch::matmul(in[0], linear->weight.t()) + linear->bias};
  };
  torch::matmul(x, linear->weight.t()).add(linear->bias).sum().backward();
  const Tensor expected = linear->weight.grad().clone();
  linear->weight.mutable_grad() = Tensor();
  linear->bias.mutable_grad() = Tensor();
  ddp::nn::checkpoint(run, {x}, {linear->weight, linear->bias, linear->weight})[0].sum().backward();
  EXPECT_TRUE(torch::equal(linear->weight.grad(), expected));
}

// BatchNorm's running statistics are updated once, as without
// checkpointing: the recompute's update is undone (a module's buffers, or
// those given to the function form).
TEST(NnCheckpoint, BatchNormStatisticsAreUpdatedOnce) {
  auto statistics = [](int how) {
    torch::manual_seed(3);
    nn::Sequential block(nn::Linear(6, 8), nn::BatchNorm1d(8));
    const Tensor x = torch::randn({5, 6}, torch::requires_grad());
    Tensor y;
    if (how == 0) {
      y = block->forward(x);
    } else if (how == 1) {
      y = ddp::nn::checkpoint(block, x);
    } else {
      y = ddp::nn::checkpoint(
          [&](const std::vector<Tensor>& in) { return std::vector<Tensor>{block->forward(in[0])}; },
          {x}, ddp::nn::trainable_parameters(*block), block->buffers())[0];
    }
    y.pow(2).sum().backward();
    std::vector<Tensor> values;
    for (const auto& b : block->buffers()) values.push_back(b.clone());
    values.push_back(block[0]->as<nn::Linear>()->weight.grad().clone());
    return values;
  };
  const auto plain = statistics(0);
  for (int how : {1, 2}) {
    const auto checkpointed = statistics(how);
    ASSERT_EQ(checkpointed.size(), plain.size());
    for (size_t i = 0; i < plain.size(); ++i) {
      EXPECT_TRUE(torch::equal(checkpointed[i], plain[i]))
          << "form " << how << ", tensor " << i << ": " << checkpointed[i] << " vs " << plain[i];
    }
  }
}

TEST(NnCheckpoint, EachMistakeIsANamedError) {
  nn::Linear linear(4, 4);
  const Tensor x = torch::randn({2, 4});
  // A function reading parameters it was not given, on inputs without grad.
  ddp::nn::CheckpointedFunction reads_linear = [&](const std::vector<Tensor>& in) {
    return std::vector<Tensor>{linear(in[0])};
  };
  try {
    ddp::nn::checkpoint(reads_linear, {x});
    FAIL() << "no error";
  } catch (const ddp::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("pass the trainable tensors"), std::string::npos)
        << e.what();
  }
  ddp::nn::CheckpointedFunction returns_nothing = [](const std::vector<Tensor>&) {
    return std::vector<Tensor>{};
  };
  EXPECT_THROW(ddp::nn::checkpoint(returns_nothing, {x}, {linear->weight}), ddp::ConfigError);
  EXPECT_THROW(ddp::nn::checkpoint(reads_linear, {x}, {Tensor()}), ddp::ConfigError);
}

}  // namespace

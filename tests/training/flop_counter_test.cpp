// Tests of ddp::training::FlopCounter and the machine's peak (ddp/training/
// flop_counter.hpp, machine_peak.hpp): each product's FLOPs against its
// closed form (2 a multiply-add), forward and backward, an operator inside a
// counted one counted once, element-wise work not counted, one counter at a
// time; the peak measured and MFU's arithmetic.

#include <gtest/gtest.h>
#include <sched.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <ATen/Parallel.h>

#include "common/error_capture.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/training/flop_counter.hpp"
#include "ddp/training/machine_peak.hpp"

using namespace ddp::training;
using ddp::testing::error_of;

namespace {

TEST(TrainingFlopCounter, LinearIsOneAddmmOfTwoFlopsAMultiplyAdd) {
  torch::nn::Linear linear(64, 32);
  const torch::Tensor x = torch::randn({8, 64});
  FlopCounter counter;
  linear->forward(x);
  EXPECT_EQ(counter.flops(), 2.0 * 8 * 64 * 32);
  const auto by_operator = counter.flops_by_operator();
  ASSERT_EQ(by_operator.size(), 1u);
  EXPECT_EQ(by_operator.begin()->first, "aten::addmm");
}

TEST(TrainingFlopCounter, BatchedAndBiasFreeProductsAreCountedOnceThroughMatmul) {
  torch::nn::Linear linear(torch::nn::LinearOptions(64, 32).bias(false));
  FlopCounter counter;
  linear->forward(torch::randn({4, 8, 64}));  // matmul of a 3-d input: one mm
  EXPECT_EQ(counter.flops(), 2.0 * 4 * 8 * 64 * 32);
  counter.reset();
  EXPECT_EQ(counter.flops(), 0);
  torch::matmul(torch::randn({3, 5, 7}), torch::randn({3, 7, 2}));  // bmm
  torch::mv(torch::randn({6, 4}), torch::randn({4}));
  torch::dot(torch::randn({9}), torch::randn({9}));
  EXPECT_EQ(counter.flops(), 2.0 * 3 * 5 * 7 * 2 + 2.0 * 6 * 4 + 2.0 * 9);
}

TEST(TrainingFlopCounter, AProductMadeOfOthersIsCountedOnceAtTheOutermost) {
  // LibTorch's CPU addbmm adds one addmm_ a batch into its result.
  FlopCounter counter;
  torch::addbmm(torch::zeros({5, 2}), torch::randn({3, 5, 7}), torch::randn({3, 7, 2}));
  EXPECT_EQ(counter.flops(), 2.0 * 3 * 5 * 7 * 2);
  const auto by_operator = counter.flops_by_operator();
  ASSERT_EQ(by_operator.size(), 1u);
  EXPECT_EQ(by_operator.begin()->first, "aten::addbmm");
  counter.reset();
  torch::Tensor c = torch::zeros({4, 3});
  c.addmm_(torch::randn({4, 6}), torch::randn({6, 3}));  // the in-place form alone
  EXPECT_EQ(counter.flops(), 2.0 * 4 * 6 * 3);
}

TEST(TrainingFlopCounter, BackwardCountsEachGradientItComputes) {
  torch::nn::Linear linear(64, 32);
  const double forward = 2.0 * 8 * 64 * 32;
  {
    // Weight's gradient only: the input needs none.
    const torch::Tensor x = torch::randn({8, 64});
    FlopCounter counter;
    linear->forward(x).sum().backward();
    EXPECT_EQ(counter.flops(), 2 * forward);
  }
  {
    const torch::Tensor x = torch::randn({8, 64}, torch::requires_grad());
    FlopCounter counter;
    linear->forward(x).sum().backward();
    EXPECT_EQ(counter.flops(), 3 * forward);
  }
}

TEST(TrainingFlopCounter, ConvolutionsStridedGroupedAndTransposed) {
  torch::nn::Conv2d conv(torch::nn::Conv2dOptions(4, 8, 3).stride(2).padding(1).groups(2));
  const torch::Tensor x = torch::randn({2, 4, 16, 16});
  // 8 x 8 outputs a channel, each 4 / 2 inputs x 3 x 3.
  const double forward = 2.0 * 2 * 8 * 8 * 8 * (4 / 2) * 9;
  {
    FlopCounter counter;
    conv->forward(x);
    EXPECT_EQ(counter.flops(), forward);
    ASSERT_EQ(counter.flops_by_operator().size(), 1u);
    EXPECT_EQ(counter.flops_by_operator().begin()->first, "aten::convolution");
  }
  {
    FlopCounter counter;
    conv->forward(x).sum().backward();  // the weight's gradient, not the input's
    EXPECT_EQ(counter.flops(), 2 * forward);
  }
  torch::nn::ConvTranspose2d up(torch::nn::ConvTranspose2dOptions(4, 6, 2).stride(2));
  FlopCounter counter;
  up->forward(x);  // each of 2 x 4 x 16 x 16 inputs gives 6 x 2 x 2 products
  EXPECT_EQ(counter.flops(), 2.0 * 2 * 4 * 16 * 16 * 6 * 4);
}

#if TORCH_VERSION_MAJOR >= 2
TEST(TrainingFlopCounter, FusedAttentionCountsItsTwoProducts) {
  const int64_t b = 2, h = 3, l = 16, s = 24, e = 8, ev = 4;
  const torch::Tensor q = torch::randn({b, h, l, e}, torch::requires_grad()),
                      k = torch::randn({b, h, s, e}, torch::requires_grad()),
                      v = torch::randn({b, h, s, ev}, torch::requires_grad());
  const double forward = 2.0 * b * h * l * s * (e + ev);
  FlopCounter counter;
  torch::Tensor out = at::scaled_dot_product_attention(q, k, v);
  EXPECT_EQ(counter.flops(), forward);
  out.sum().backward();
  EXPECT_EQ(counter.flops(), 3 * forward);
}
#endif

TEST(TrainingFlopCounter, ElementWiseWorkAndOperationsOutsideItsLifeAreNotCounted) {
  const torch::Tensor a = torch::randn({64, 64});
  torch::mm(a, a);  // before
  {
    FlopCounter counter;
    torch::relu(a + a * 2).exp().sum();
    torch::layer_norm(a, {64});
    EXPECT_EQ(counter.flops(), 0);
  }
  FlopCounter counter;
  EXPECT_EQ(counter.flops(), 0);
}

TEST(TrainingFlopCounter, OneCounterAtATimeIsANamedError) {
  auto first = std::make_unique<FlopCounter>();
  const std::string message = error_of<ddp::ConfigError>([] { FlopCounter second; });
  EXPECT_NE(message.find("another FlopCounter of this process is counting"), std::string::npos)
      << message;
  torch::mm(torch::randn({4, 4}), torch::randn({4, 4}));
  EXPECT_EQ(first->flops(), 2.0 * 4 * 4 * 4);
  first.reset();
  FlopCounter next;
  torch::mm(torch::randn({2, 3}), torch::randn({3, 5}));
  EXPECT_EQ(next.flops(), 2.0 * 2 * 3 * 5);
}

TEST(TrainingMachinePeak, MeasuredOnOneThreadAndTheThreadsSetBack) {
  at::set_num_threads(2);
  const MachinePeak peak = measure_machine_peak();
  EXPECT_EQ(at::get_num_threads(), 2);
  // Any BLAS does more than 0.5 GFLOP/s and any memory more than 0.5 GB/s.
  EXPECT_GT(peak.sgemm_gflops_per_core, 0.5);
  EXPECT_GT(peak.memory_gbs_per_core, 0.5);
  cpu_set_t set;
  CPU_ZERO(&set);
  ASSERT_EQ(sched_getaffinity(0, sizeof(set), &set), 0);
  EXPECT_EQ(peak.cores, CPU_COUNT(&set));
}

TEST(TrainingMachinePeak, UtilizationIsTheWorkOverTimeTimesThePeak) {
  MachinePeak peak;
  peak.sgemm_gflops_per_core = 10;
  peak.memory_gbs_per_core = 20;
  peak.cores = 2;
  EXPECT_DOUBLE_EQ(model_flops_utilization(6e9, 1.5, peak, 2), 0.2);
  EXPECT_DOUBLE_EQ(bandwidth_utilization(5e9, 0.5, peak), 0.5);
  std::string message =
      error_of<ddp::ConfigError>([&] { model_flops_utilization(1e9, 0, peak, 2); });
  EXPECT_NE(message.find("seconds > 0 (got 0)"), std::string::npos) << message;
  message = error_of<ddp::ConfigError>([&] { model_flops_utilization(1e9, 1, peak, 0); });
  EXPECT_NE(message.find("cores must be >= 1, got 0"), std::string::npos) << message;
  message = error_of<ddp::ConfigError>([&] { bandwidth_utilization(1e9, 1, MachinePeak{}); });
  EXPECT_NE(message.find("take the peak from measure_machine_peak()"), std::string::npos)
      << message;
}

}  // namespace

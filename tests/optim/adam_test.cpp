// ddp::optim::AdamW and ddp::optim::Adam against LibTorch's, bit for bit on
// CPU: every option (weight decay, amsgrad, betas, eps) over parameters
// whose sizes end inside a vector, hold one element or none, exceed ATen's
// grain, or are double; param groups with their own options, a parameter
// without a gradient and one whose first comes late; and the steps left to
// LibTorch (a layout the pass does not take, bfloat16, a sparse gradient).

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <ostream>
#include <string>
#include <vector>

#include "adam_checks.hpp"
#include "ddp/optim/adam.hpp"
#include "ddp/optim/adamw.hpp"

namespace {

using ddp::testing::awkward_parameters;
using ddp::testing::expect_same_adam;
using ddp::testing::give_gradients;
using ddp::testing::leaf_copies;
using torch::optim::AdamOptions;
using torch::optim::AdamParamState;
using torch::optim::AdamWOptions;
using torch::optim::AdamWParamState;

constexpr int kSteps = 6;

/// Steps a Subject and a Reference over copies of the same parameters with
/// the same gradients, and expects them bit-identical after every step.
template <typename Subject, typename Reference, typename State, typename Options>
void expect_steps_as_libtorch(const Options& options) {
  std::vector<at::Tensor> params = awkward_parameters(3);
  std::vector<at::Tensor> reference_params = leaf_copies(params);
  Subject optimizer(params, options);
  Reference reference(reference_params, options);
  for (int step = 0; step < kSteps; ++step) {
    give_gradients(params, step);
    give_gradients(reference_params, step);
    optimizer.step();
    reference.step();
    expect_same_adam<State>(optimizer, reference, "after step " + std::to_string(step));
  }
  // The parameters moved, so the comparison compared updates.
  EXPECT_FALSE(torch::equal(params[0], awkward_parameters(3)[0]));
}

struct AdamCase {
  std::string name;
  double lr;
  double beta1, beta2, eps, weight_decay;
  bool amsgrad;
};
void PrintTo(const AdamCase& c, std::ostream* out) { *out << c.name; }

class OptimAdamOptions : public ::testing::TestWithParam<AdamCase> {};

/// The case's options as Options (AdamOptions or AdamWOptions).
template <typename Options>
Options options_of(const AdamCase& c) {
  return Options(c.lr)
      .betas({c.beta1, c.beta2})
      .eps(c.eps)
      .weight_decay(c.weight_decay)
      .amsgrad(c.amsgrad);
}

TEST_P(OptimAdamOptions, AdamWMatchesLibTorchBitForBit) {
  expect_steps_as_libtorch<ddp::optim::AdamW, torch::optim::AdamW, AdamWParamState>(
      options_of<AdamWOptions>(GetParam()));
}

TEST_P(OptimAdamOptions, AdamMatchesLibTorchBitForBit) {
  expect_steps_as_libtorch<ddp::optim::Adam, torch::optim::Adam, AdamParamState>(
      options_of<AdamOptions>(GetParam()));
}

INSTANTIATE_TEST_SUITE_P(
    Options, OptimAdamOptions,
    ::testing::Values(AdamCase{"NoWeightDecay", 1e-3, 0.9, 0.999, 1e-8, 0, false},
                      AdamCase{"WeightDecay", 1e-2, 0.9, 0.999, 1e-8, 0.1, false},
                      AdamCase{"Amsgrad", 1e-3, 0.9, 0.999, 1e-8, 0, true},
                      AdamCase{"AmsgradAndWeightDecay", 3e-3, 0.9, 0.999, 1e-8, 1e-2, true},
                      AdamCase{"OtherBetasAndEps", 5e-2, 0.8, 0.95, 1e-6, 0, false},
                      AdamCase{"ZeroBetas", 1e-3, 0.0, 0.0, 1e-3, 0.5, false}),
    [](const ::testing::TestParamInfo<AdamCase>& info) { return info.param.name; });

TEST(OptimAdam, TwoGroupsAParameterWithoutGradientAndALateOne) {
  auto params = awkward_parameters(5);
  auto reference_params = leaf_copies(params);
  auto groups = [](std::vector<at::Tensor>& p) {
    return std::vector<torch::optim::OptimizerParamGroup>{
        torch::optim::OptimizerParamGroup({p[0], p[1], p[2]}),
        torch::optim::OptimizerParamGroup(
            {p[3], p[4]},
            std::make_unique<AdamWOptions>(
                AdamWOptions(2e-2).betas({0.5, 0.9}).weight_decay(0.3).amsgrad(true)))};
  };
  const AdamWOptions defaults = AdamWOptions(1e-3).weight_decay(0);
  ddp::optim::AdamW optimizer(groups(params), defaults);
  torch::optim::AdamW reference(groups(reference_params), defaults);
  for (int step = 0; step < kSteps; ++step) {
    for (auto* side : {&params, &reference_params}) {
      give_gradients(*side, step);
      (*side)[1].mutable_grad() = at::Tensor();                // never a gradient
      if (step < 3) (*side)[3].mutable_grad() = at::Tensor();  // its first at step 3
    }
    // Both forms of step(): the closure's loss is returned.
    const at::Tensor loss = optimizer.step([&] { return params[0].sum(); });
    reference.step();
    EXPECT_TRUE(loss.defined());
    expect_same_adam<AdamWParamState>(optimizer, reference, "after step " + std::to_string(step));
  }
  EXPECT_EQ(ddp::testing::adam_state_of<AdamWParamState>(optimizer, params[1]), nullptr);
  EXPECT_EQ(ddp::testing::adam_state_of<AdamWParamState>(optimizer, params[3])->step(), kSteps - 3);
}

TEST(OptimAdam, AParameterTwiceInAGroupIsUpdatedTwiceAsByLibTorch) {
  auto params = awkward_parameters(7);
  auto reference_params = leaf_copies(params);
  std::vector<at::Tensor> twice = {params[0], params[3], params[0]};
  std::vector<at::Tensor> reference_twice = {reference_params[0], reference_params[3],
                                             reference_params[0]};
  ddp::optim::AdamW optimizer(twice, AdamWOptions(1e-2));
  torch::optim::AdamW reference(reference_twice, AdamWOptions(1e-2));
  for (int step = 0; step < 3; ++step) {
    give_gradients(params, step);
    give_gradients(reference_params, step);
    optimizer.step();
    reference.step();
    expect_same_adam<AdamWParamState>(optimizer, reference, "after step " + std::to_string(step));
  }
  EXPECT_EQ(ddp::testing::adam_state_of<AdamWParamState>(optimizer, params[0])->step(), 6);
}

// Note [When LibTorch's step runs instead] (ddp/optim/adamw.hpp): one
// parameter the pass does not take hands the whole step to LibTorch. A
// parameter laid out otherwise but dense, its gradient and moments laid out
// alike, is the pass's: it walks the four in storage order.
TEST(OptimAdam, LayoutsAndDtypesThePassDoesNotTakeStepAsLibTorch) {
  for (const std::string odd :
       {"transposed", "transposed, its gradient contiguous", "every other column", "bfloat16"}) {
    SCOPED_TRACE(odd);
    auto params = awkward_parameters(9);
    if (odd == "bfloat16")
      params.push_back(torch::randn({6, 4}, torch::kBFloat16).requires_grad_(true));
    else if (odd == "every other column")  // not dense: a leaf that views every other element
      params.push_back(torch::randn({6, 8}).slice(1, 0, 8, 2).requires_grad_(true));
    else
      params.push_back(torch::randn({6, 4}).t().requires_grad_(true));
    auto reference_params = leaf_copies(params);
    if (odd == "every other column") {  // leaf_copies made it dense: view the copy alike
      reference_params.back() =
          torch::zeros({6, 8}).slice(1, 0, 8, 2).copy_(params.back().detach()).requires_grad_(true);
    }
    ddp::optim::Adam optimizer(params, AdamOptions(1e-2).weight_decay(0.1));
    torch::optim::Adam reference(reference_params, AdamOptions(1e-2).weight_decay(0.1));
    for (int step = 0; step < 3; ++step) {
      for (auto* side : {&params, &reference_params}) {
        give_gradients(*side, step);  // laid out as each parameter (randn_like)
        if (odd == "transposed, its gradient contiguous")
          side->back().mutable_grad() = side->back().grad().contiguous();
      }
      optimizer.step();
      reference.step();
      expect_same_adam<AdamParamState>(optimizer, reference, "after step " + std::to_string(step));
    }
  }
}

TEST(OptimAdam, ASparseGradientIsLibTorchsError) {
  auto p = torch::randn({4, 3}).requires_grad_(true);
  p.mutable_grad() = torch::randn({4, 3}).to_sparse();
  ddp::optim::AdamW optimizer({p}, AdamWOptions(1e-2));
  try {
    optimizer.step();
    FAIL() << "a sparse gradient was stepped";
  } catch (const c10::Error& e) {
    EXPECT_NE(std::string(e.what()).find("AdamW does not support sparse gradients"),
              std::string::npos)
        << e.what();
  }
}

TEST(OptimAdam, ParametersAndMomentsAreWrittenInPlaceSoTheirVersionsAdvance) {
  auto p = torch::randn({5, 5}).requires_grad_(true);
  ddp::optim::AdamW optimizer({p}, AdamWOptions(1e-2));
  // A graph that saved p for backward, then a step: backward must refuse.
  at::Tensor saved_p = (p * p).sum();
  p.mutable_grad() = torch::ones_like(p);
  const at::Tensor before = p.detach().clone();
  const auto version = p._version();
  optimizer.step();
  EXPECT_GT(p._version(), version);
  EXPECT_FALSE(torch::equal(p.detach(), before));
  const auto* state = ddp::testing::adam_state_of<AdamWParamState>(optimizer, p);
  ASSERT_NE(state, nullptr);
  EXPECT_GT(state->exp_avg()._version(), 0);
  EXPECT_THROW(saved_p.backward(), c10::Error);
}

}  // namespace

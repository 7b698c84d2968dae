// ddp::optim::SGD against torch::optim::SGD, bit for bit on CPU: every
// combination of momentum, dampening, Nesterov and weight decay on a small
// model; two param groups with their own options, float32 and float64
// parameters in one group, a parameter that never gets a gradient and one
// that gets its first late; and the steps LibTorch takes per parameter
// (a sparse gradient, a parameter twice in a group).

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <memory>
#include <ostream>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ddp/optim/sgd.hpp"
#include "sgd_checks.hpp"

namespace {

using ddp::testing::bit_identical;
using ddp::testing::expect_same_parameters_and_buffers;
using ddp::testing::momentum_buffer_of;
using torch::optim::SGDOptions;

constexpr int kSgdSteps = 5;

struct SgdCase {
  std::string name;
  SGDOptions options;
};

// gtest names a failing case by its name, not by its bytes.
void PrintTo(const SgdCase& c, std::ostream* out) { *out << c.name; }

class OptimSgdOptions : public ::testing::TestWithParam<SgdCase> {};

TEST_P(OptimSgdOptions, ParametersAndMomentumBuffersMatchLibTorchBitForBit) {
  const SGDOptions options = GetParam().options;
  torch::manual_seed(1);
  auto model = ddp::testing::small_model();
  torch::manual_seed(1);
  auto reference = ddp::testing::small_model();
  ddp::optim::SGD optimizer(model->parameters(), options);
  torch::optim::SGD reference_optimizer(reference->parameters(), options);
  const auto batches = ddp::testing::small_batches(kSgdSteps, 2);
  for (int step = 0; step < kSgdSteps; ++step) {
    const bool closure = step % 2 == 1;  // both forms of step()
    const at::Tensor loss = ddp::testing::train_step(model, optimizer, batches[step], closure);
    const at::Tensor reference_loss =
        ddp::testing::train_step(reference, reference_optimizer, batches[step], closure);
    EXPECT_TRUE(bit_identical(loss, reference_loss)) << "the loss of step " << step;
    expect_same_parameters_and_buffers(optimizer, reference_optimizer,
                                       "after step " + std::to_string(step));
  }
  // The parameters moved, so the comparison compared updates.
  torch::manual_seed(1);
  auto initial = ddp::testing::small_model();
  EXPECT_FALSE(torch::equal(initial->parameters()[0], model->parameters()[0]));
}

INSTANTIATE_TEST_SUITE_P(
    Optim, OptimSgdOptions,
    ::testing::Values(SgdCase{"Plain", SGDOptions(0.1)},
                      SgdCase{"Momentum", SGDOptions(0.1).momentum(0.9)},
                      SgdCase{"Dampening", SGDOptions(0.1).momentum(0.9).dampening(0.25)},
                      SgdCase{"Nesterov", SGDOptions(0.1).momentum(0.9).nesterov(true)},
                      SgdCase{"WeightDecay", SGDOptions(0.1).weight_decay(1e-2)},
                      SgdCase{"MomentumWeightDecay",
                              SGDOptions(0.05).momentum(0.9).weight_decay(1e-2)},
                      SgdCase{"DampeningWeightDecay",
                              SGDOptions(0.2).momentum(0.8).dampening(0.5).weight_decay(5e-3)},
                      SgdCase{"NesterovWeightDecay",
                              SGDOptions(0.1).momentum(0.9).nesterov(true).weight_decay(1e-2)}),
    [](const ::testing::TestParamInfo<SgdCase>& info) { return info.param.name; });

// Parameters of the shapes and dtypes given, drawn from `seed`, each
// requiring grad.
std::vector<at::Tensor> leaves(
    const std::vector<std::pair<std::vector<int64_t>, at::ScalarType>>& specs, uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<at::Tensor> made;
  for (const auto& [shape, dtype] : specs) {
    made.push_back(torch::randn(shape, torch::dtype(dtype)).requires_grad_(true));
  }
  return made;
}

// A loss of the parameters whose indices are in `used`, against `targets`
// (one per parameter): each term in its parameter's dtype, summed in double.
at::Tensor loss_of(const std::vector<at::Tensor>& params, const std::vector<at::Tensor>& targets,
                   const std::set<size_t>& used) {
  at::Tensor loss = torch::zeros({}, torch::kDouble);
  for (size_t i : used) {
    const at::Tensor& p = params[i];
    loss = loss + ((p - targets[i]).pow(2).sum() + (p.sin() * targets[i]).sum()).to(torch::kDouble);
  }
  return loss;
}

TEST(OptimSgd, TwoGroupsMixedDtypesAParameterWithoutGradientAndALateOne) {
  using torch::kDouble;
  using torch::kFloat;
  // Group 0: float32 and float64; parameter 2 never gets a gradient,
  // parameter 3 gets its first at step 2 (its buffer is made while the
  // others' are decayed). Group 1: other options, both dtypes.
  const auto params = leaves({{{4, 3}, kFloat},
                              {{5}, kDouble},
                              {{3}, kFloat},
                              {{2, 2}, kDouble},
                              {{6}, kFloat},
                              {{3, 2}, kDouble}},
                             3);
  const auto reference_params = ddp::testing::leaf_copies(params);
  const at::Tensor never_used = params[2].detach().clone();
  const SGDOptions first = SGDOptions(0.05).momentum(0.9).nesterov(true).weight_decay(1e-2);
  const SGDOptions second = SGDOptions(0.2).momentum(0.5).dampening(0.3);
  auto groups_of = [&](const std::vector<at::Tensor>& p) {
    return std::vector<torch::optim::OptimizerParamGroup>{
        torch::optim::OptimizerParamGroup({p[0], p[1], p[2], p[3]},
                                          std::make_unique<SGDOptions>(first)),
        torch::optim::OptimizerParamGroup({p[4], p[5]}, std::make_unique<SGDOptions>(second))};
  };
  ddp::optim::SGD optimizer(groups_of(params), SGDOptions(0.1));
  torch::optim::SGD reference_optimizer(groups_of(reference_params), SGDOptions(0.1));

  torch::manual_seed(4);
  for (int step = 0; step < kSgdSteps; ++step) {
    std::vector<at::Tensor> targets;
    for (const auto& p : params) targets.push_back(torch::randn(p.sizes(), p.options()));
    std::set<size_t> used{0, 1, 4, 5};
    if (step >= 2) used.insert(3);
    optimizer.zero_grad();
    reference_optimizer.zero_grad();
    loss_of(params, targets, used).backward();
    loss_of(reference_params, targets, used).backward();
    optimizer.step();
    reference_optimizer.step();
    expect_same_parameters_and_buffers(optimizer, reference_optimizer,
                                       "after step " + std::to_string(step));
    EXPECT_EQ(momentum_buffer_of(optimizer, params[3]).defined(), step >= 2);
  }
  // The parameter without a gradient: untouched, no state.
  EXPECT_FALSE(params[2].grad().defined());
  EXPECT_TRUE(bit_identical(params[2], never_used));
  EXPECT_FALSE(momentum_buffer_of(optimizer, params[2]).defined());
  EXPECT_EQ(optimizer.state().size(), 5u);
  EXPECT_EQ(params[1].scalar_type(), kDouble);  // each list kept its dtype
  EXPECT_EQ(momentum_buffer_of(optimizer, params[1]).scalar_type(), kDouble);
}

// A model whose embedding has sparse gradients, and a dense layer.
struct SparseNetImpl : torch::nn::Module {
  SparseNetImpl()
      : embedding(register_module(
            "embedding", torch::nn::Embedding(torch::nn::EmbeddingOptions(10, 4).sparse(true)))),
        linear(register_module("linear", torch::nn::Linear(4, 2))) {}
  at::Tensor forward(const at::Tensor& indices) { return linear(embedding(indices)).sum(); }
  torch::nn::Embedding embedding;
  torch::nn::Linear linear;
};
TORCH_MODULE(SparseNet);

TEST(OptimSgd, SparseGradientsTakeLibTorchsPerParameterStep) {
  torch::manual_seed(5);
  SparseNet net;
  torch::manual_seed(5);
  SparseNet reference;
  const SGDOptions options = SGDOptions(0.1).momentum(0.9);
  ddp::optim::SGD optimizer(net->parameters(), options);
  torch::optim::SGD reference_optimizer(reference->parameters(), options);
  for (int step = 0; step < kSgdSteps; ++step) {
    const at::Tensor indices = torch::tensor({step % 10, (3 * step + 1) % 10, 7});
    optimizer.zero_grad();
    reference_optimizer.zero_grad();
    net->forward(indices).backward();
    reference->forward(indices).backward();
    ASSERT_TRUE(net->embedding->weight.grad().is_sparse());
    optimizer.step();
    reference_optimizer.step();
    expect_same_parameters_and_buffers(optimizer, reference_optimizer,
                                       "after step " + std::to_string(step));
  }
}

TEST(OptimSgd, AParameterTwiceInAGroupIsUpdatedTwiceAsByLibTorch) {
  const auto params = leaves({{{3, 3}, torch::kFloat}, {{4}, torch::kFloat}}, 6);
  const auto reference_params = ddp::testing::leaf_copies(params);
  const SGDOptions options = SGDOptions(0.1).momentum(0.9).weight_decay(1e-2);
  ddp::optim::SGD optimizer(std::vector<at::Tensor>{params[0], params[1], params[0]}, options);
  torch::optim::SGD reference_optimizer(
      std::vector<at::Tensor>{reference_params[0], reference_params[1], reference_params[0]},
      options);
  torch::manual_seed(7);
  for (int step = 0; step < kSgdSteps; ++step) {
    const std::vector<at::Tensor> targets{torch::randn({3, 3}), torch::randn({4})};
    optimizer.zero_grad();
    reference_optimizer.zero_grad();
    loss_of(params, targets, {0, 1}).backward();
    loss_of(reference_params, targets, {0, 1}).backward();
    optimizer.step();
    reference_optimizer.step();
    expect_same_parameters_and_buffers(optimizer, reference_optimizer,
                                       "after step " + std::to_string(step));
  }
}

TEST(OptimSgd, ParametersAreWrittenInPlaceSoTheirVersionsAdvance) {
  // As PyTorch's SGD writes them; LibTorch's writes through .data(), which
  // leaves the version counter (Note [Same operations as LibTorch's step]).
  const auto params = leaves({{{3}, torch::kFloat}}, 9);
  const auto reference_params = ddp::testing::leaf_copies(params);
  ddp::optim::SGD optimizer(params, SGDOptions(0.1).momentum(0.9));
  torch::optim::SGD reference_optimizer(reference_params, SGDOptions(0.1).momentum(0.9));
  const auto version = params[0]._version(), reference_version = reference_params[0]._version();
  for (int step = 0; step < 2; ++step) {
    loss_of(params, {torch::ones({3})}, {0}).backward();
    loss_of(reference_params, {torch::ones({3})}, {0}).backward();
    optimizer.step();
    reference_optimizer.step();
  }
  EXPECT_EQ(params[0]._version(), version + 2);  // one in-place update per step
  EXPECT_EQ(reference_params[0]._version(), reference_version);
  EXPECT_TRUE(bit_identical(params[0], reference_params[0]));
}

}  // namespace

#pragma once

// What the tests of ddp::optim::SGD share: a small model and its batches,
// the momentum buffer an optimizer holds for a parameter, and bitwise
// comparisons of tensors and of whole optimizers (parameters and buffers).

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "base/compat/torch_compat.hpp"

namespace ddp::testing {

/// Linear(6, 8), Tanh, Linear(8, 3): 4 parameters, the same values after
/// the same torch::manual_seed.
inline torch::nn::Sequential small_model() {
  return torch::nn::Sequential(torch::nn::Linear(6, 8), torch::nn::Tanh(), torch::nn::Linear(8, 3));
}

/// `count` batches (inputs 5x6, targets 5x3) drawn from `seed`.
inline std::vector<std::pair<at::Tensor, at::Tensor>> small_batches(int count, uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<std::pair<at::Tensor, at::Tensor>> batches;
  for (int i = 0; i < count; ++i) batches.emplace_back(torch::randn({5, 6}), torch::randn({5, 3}));
  return batches;
}

/// Copies of `params` with the same values, leaves of their own.
inline std::vector<at::Tensor> leaf_copies(const std::vector<at::Tensor>& params) {
  std::vector<at::Tensor> copies;
  for (const auto& p : params) copies.push_back(p.detach().clone().requires_grad_(true));
  return copies;
}

/// One training step of `model` on `batch` (zero_grad, MSE, backward,
/// step); with `closure`, the loss is computed inside step()'s closure.
/// Returns the loss.
inline at::Tensor train_step(torch::nn::Sequential& model, torch::optim::Optimizer& optimizer,
                             const std::pair<at::Tensor, at::Tensor>& batch, bool closure) {
  auto loss_of = [&] {
    optimizer.zero_grad();
    at::Tensor loss = torch::mse_loss(model->forward(batch.first), batch.second);
    loss.backward();
    return loss;
  };
  if (closure) return optimizer.step(loss_of);
  at::Tensor loss = loss_of();
  optimizer.step();
  return loss;
}

/// The momentum buffer `optimizer` holds for `param` (undefined if none).
inline at::Tensor momentum_buffer_of(const torch::optim::Optimizer& optimizer,
                                     const at::Tensor& param) {
  const auto found = optimizer.state().find(base::compat::optimizer_state_key(param));
  if (found == optimizer.state().end()) return {};
  return static_cast<const torch::optim::SGDParamState&>(*found->second).momentum_buffer();
}

/// Whether `a` and `b` are both undefined, or have the same dtype, shape
/// and bytes (stricter than torch::equal: -0.0 is not 0.0, NaN is NaN).
inline ::testing::AssertionResult bit_identical(const at::Tensor& a, const at::Tensor& b) {
  if (a.defined() != b.defined()) {
    return ::testing::AssertionFailure() << "one tensor is undefined, the other is not";
  }
  if (!a.defined()) return ::testing::AssertionSuccess();
  if (a.layout() != b.layout()) return ::testing::AssertionFailure() << "the layouts differ";
  if (a.is_sparse()) {  // the same entries: indices and values
    const at::Tensor ca = a.coalesce(), cb = b.coalesce();
    auto indices = bit_identical(ca.indices(), cb.indices());
    return indices ? bit_identical(ca.values(), cb.values()) : indices;
  }
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes()) {
    return ::testing::AssertionFailure()
           << a.scalar_type() << a.sizes() << " against " << b.scalar_type() << b.sizes();
  }
  const at::Tensor ca = a.contiguous(), cb = b.contiguous();
  if (std::memcmp(ca.data_ptr(), cb.data_ptr(), ca.nbytes()) == 0) {
    return ::testing::AssertionSuccess();
  }
  return ::testing::AssertionFailure()
         << "the bytes differ; largest difference "
         << (ca.to(torch::kDouble) - cb.to(torch::kDouble)).abs().max().item<double>();
}

/// Expects every parameter of every param group of `subject`, and its
/// momentum buffer (or its absence), bit-identical to `reference`'s (two
/// optimizers over copies of the same parameters).
inline void expect_same_parameters_and_buffers(const torch::optim::Optimizer& subject,
                                               const torch::optim::Optimizer& reference,
                                               const std::string& when) {
  ASSERT_EQ(subject.param_groups().size(), reference.param_groups().size()) << when;
  for (size_t g = 0; g < subject.param_groups().size(); ++g) {
    const auto& mine = subject.param_groups()[g].params();
    const auto& theirs = reference.param_groups()[g].params();
    ASSERT_EQ(mine.size(), theirs.size()) << when;
    for (size_t i = 0; i < mine.size(); ++i) {
      EXPECT_TRUE(bit_identical(mine[i], theirs[i]))
          << when << ": parameter " << i << " of group " << g;
      EXPECT_TRUE(bit_identical(momentum_buffer_of(subject, mine[i]),
                                momentum_buffer_of(reference, theirs[i])))
          << when << ": momentum buffer of parameter " << i << " of group " << g;
    }
  }
  EXPECT_EQ(subject.state().size(), reference.state().size()) << when;
}

}  // namespace ddp::testing

#pragma once

// What the tests of ddp::optim::Adam and AdamW share: parameters of awkward
// sizes with gradients drawn from a seed, and bitwise comparisons of two
// optimizers' parameters and state (step, both moments, the amsgrad max).

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>
#include <vector>

#include "base/compat/torch_compat.hpp"
#include "sgd_checks.hpp"

namespace ddp::testing {

/// Fresh leaf parameters drawn from `seed`: sizes that end inside a vector
/// (37 x 53), one element, none, one over ATen's grain of 32768 elements
/// (split across threads) and one of double.
inline std::vector<at::Tensor> awkward_parameters(uint64_t seed) {
  torch::manual_seed(seed);
  std::vector<at::Tensor> params = {torch::randn({37, 53}), torch::randn({1}), torch::randn({0}),
                                    torch::randn({301, 113}), torch::randn({7, 3}, torch::kDouble)};
  for (auto& p : params) p.requires_grad_(true);
  return params;
}

/// Gives each of `params` the gradient drawn for it at `step` (the same
/// values for equal shapes, whichever the set).
inline void give_gradients(std::vector<at::Tensor>& params, int step) {
  torch::manual_seed(1000 + step);
  for (auto& p : params) p.mutable_grad() = torch::randn_like(p) * (1 + step);
}

/// The state `optimizer` holds for `param`, as State (null when none).
template <typename State>
const State* adam_state_of(const torch::optim::Optimizer& optimizer, const at::Tensor& param) {
  const auto found = optimizer.state().find(base::compat::optimizer_state_key(param));
  return found == optimizer.state().end() ? nullptr
                                          : static_cast<const State*>(found->second.get());
}

/// Expects every parameter of `subject`, and its state, bit-identical to
/// `reference`'s (two optimizers over copies of the same parameters).
template <typename State>
void expect_same_adam(const torch::optim::Optimizer& subject,
                      const torch::optim::Optimizer& reference, const std::string& when) {
  ASSERT_EQ(subject.param_groups().size(), reference.param_groups().size()) << when;
  EXPECT_EQ(subject.state().size(), reference.state().size()) << when;
  for (size_t g = 0; g < subject.param_groups().size(); ++g) {
    const auto& mine = subject.param_groups()[g].params();
    const auto& theirs = reference.param_groups()[g].params();
    ASSERT_EQ(mine.size(), theirs.size()) << when;
    for (size_t i = 0; i < mine.size(); ++i) {
      const std::string which =
          when + ": parameter " + std::to_string(i) + " of group " + std::to_string(g);
      EXPECT_TRUE(bit_identical(mine[i], theirs[i])) << which;
      const State* a = adam_state_of<State>(subject, mine[i]);
      const State* b = adam_state_of<State>(reference, theirs[i]);
      ASSERT_EQ(a == nullptr, b == nullptr) << which << ": state in one optimizer only";
      if (a == nullptr) continue;
      EXPECT_EQ(a->step(), b->step()) << which;
      EXPECT_TRUE(bit_identical(a->exp_avg(), b->exp_avg())) << which << ": exp_avg";
      EXPECT_TRUE(bit_identical(a->exp_avg_sq(), b->exp_avg_sq())) << which << ": exp_avg_sq";
      EXPECT_TRUE(bit_identical(a->max_exp_avg_sq(), b->max_exp_avg_sq()))
          << which << ": max_exp_avg_sq";
    }
  }
}

}  // namespace ddp::testing

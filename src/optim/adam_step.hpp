#pragma once

// Internal: the step that ddp::optim::Adam and ddp::optim::AdamW share
// (Note [One pass per parameter] in ddp/optim/adamw.hpp): when every
// parameter with a gradient can take the fused pass, one adam_update per
// parameter; else LibTorch's own step.

#include <torch/optim/optimizer.h>
#include <torch/utils.h>

#include <cmath>
#include <memory>
#include <tuple>

#include "base/compat/torch_compat.hpp"
#include "base/mapped_tensor.hpp"
#include "optim/adam_kernel.hpp"

namespace ddp::optim::detail {

/// Whether `p`, its gradient and its state (if it has one yet) can take the
/// fused pass: strided CPU tensors of float or double, dense, laid out
/// alike; with amsgrad, a max_exp_avg_sq too (Note [When LibTorch's step
/// runs instead] in ddp/optim/adamw.hpp).
bool adam_fusable(const at::Tensor& p, const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq,
                  const at::Tensor& max_exp_avg_sq, bool amsgrad);

/// Makes the scalars of one step `step` (counted from 1) in T.
template <typename T, typename Options>
AdamScalars<T> adam_scalars(const Options& o, int64_t step, bool decoupled) {
  const double beta1 = std::get<0>(o.betas());
  const double beta2 = std::get<1>(o.betas());
  const double bias_correction1 = 1 - std::pow(beta1, step);
  const double bias_correction2 = 1 - std::pow(beta2, step);
  AdamScalars<T> s{};
  s.beta1 = static_cast<T>(beta1);
  s.one_minus_beta1 = static_cast<T>(1 - beta1);
  s.beta2 = static_cast<T>(beta2);
  s.one_minus_beta2 = static_cast<T>(1 - beta2);
  s.bias_correction2_sqrt = static_cast<T>(std::sqrt(bias_correction2));
  s.eps = static_cast<T>(o.eps());
  s.negative_step_size = static_cast<T>(-(o.lr() / bias_correction1));
  s.decay = static_cast<T>(1 - o.lr() * o.weight_decay());
  s.weight_decay = static_cast<T>(o.weight_decay());
  s.decoupled_decay = decoupled;
  s.has_weight_decay = o.weight_decay() != 0;
  s.amsgrad = o.amsgrad();
  return s;
}

/// The fused step of an Adam-like optimizer whose options are Options and
/// whose per-parameter state is State (LibTorch's AdamOptions and
/// AdamParamState, or AdamW's). Returns false, having changed nothing, when
/// some parameter cannot take it; the caller then runs LibTorch's step.
template <typename Options, typename State>
bool fused_adam_step(std::vector<torch::optim::OptimizerParamGroup>& groups,
                     decltype(std::declval<torch::optim::Optimizer&>().state())& states,
                     bool decoupled) {
  for (auto& group : groups) {
    const bool amsgrad = static_cast<const Options&>(group.options()).amsgrad();
    for (const auto& p : group.params()) {
      if (!p.grad().defined()) continue;
      const auto found = states.find(base::compat::optimizer_state_key(p));
      const bool fresh = found == states.end();
      const State* state = fresh ? nullptr : static_cast<const State*>(found->second.get());
      if (!fresh && (!state->exp_avg().defined() || !state->exp_avg_sq().defined())) return false;
      if (!adam_fusable(p, fresh ? at::Tensor() : state->exp_avg(),
                        fresh ? at::Tensor() : state->exp_avg_sq(),
                        fresh ? at::Tensor() : state->max_exp_avg_sq(), amsgrad && !fresh))
        return false;
    }
  }
  for (auto& group : groups) {
    const auto& options = static_cast<const Options&>(group.options());
    for (auto& p : group.params()) {
      const at::Tensor& grad = p.grad();
      if (!grad.defined()) continue;
      const auto key = base::compat::optimizer_state_key(p);
      auto found = states.find(key);
      if (found == states.end()) {
        // As LibTorch: zeros laid out as the parameter; they live for the
        // job, outside the heap (Note [Long-lived buffers outside the heap]).
        auto state = std::make_unique<State>();
        state->step(0);
        state->exp_avg(base::detail::mapped_zeros_like(p));
        state->exp_avg_sq(base::detail::mapped_zeros_like(p));
        if (options.amsgrad()) state->max_exp_avg_sq(base::detail::mapped_zeros_like(p));
        found = states.emplace(key, std::move(state)).first;
      }
      auto& state = static_cast<State&>(*found->second);
      state.step(state.step() + 1);
      at::Tensor max_sq = options.amsgrad() ? state.max_exp_avg_sq() : at::Tensor();
      if (p.scalar_type() == at::kFloat) {
        adam_update(adam_scalars<float>(options, state.step(), decoupled), p.data_ptr<float>(),
                    grad.data_ptr<float>(), state.exp_avg().template data_ptr<float>(),
                    state.exp_avg_sq().template data_ptr<float>(),
                    max_sq.defined() ? max_sq.data_ptr<float>() : nullptr, p.numel());
      } else {
        adam_update(adam_scalars<double>(options, state.step(), decoupled), p.data_ptr<double>(),
                    grad.data_ptr<double>(), state.exp_avg().template data_ptr<double>(),
                    state.exp_avg_sq().template data_ptr<double>(),
                    max_sq.defined() ? max_sq.data_ptr<double>() : nullptr, p.numel());
      }
      // Written in place, as LibTorch's mul_ and addcdiv_ write them: what
      // autograd saved of them is now stale, and it must be able to tell.
      for (const at::Tensor* written : {&p, &state.exp_avg(), &state.exp_avg_sq(), &max_sq})
        if (written->defined()) written->unsafeGetTensorImpl()->bump_version();
    }
  }
  return true;
}

/// The whole step() of ddp::optim::Adam and AdamW: runs `closure` (if any,
/// with gradients enabled), then the fused step, or `libtorch_step` (the
/// base class's step, given no closure) where some parameter cannot take
/// it. Returns the closure's loss.
template <typename Options, typename State, typename LibTorchStep>
torch::Tensor adam_step(std::vector<torch::optim::OptimizerParamGroup>& groups,
                        decltype(std::declval<torch::optim::Optimizer&>().state())& states,
                        bool decoupled, const torch::optim::Optimizer::LossClosure& closure,
                        LibTorchStep&& libtorch_step) {
  torch::NoGradGuard no_grad;
  torch::Tensor loss = {};
  if (closure != nullptr) {
    at::AutoGradMode enable_grad(true);
    loss = closure();
  }
  if (!fused_adam_step<Options, State>(groups, states, decoupled)) libtorch_step();
  return loss;
}

}  // namespace ddp::optim::detail

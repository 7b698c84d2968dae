#include "optim/adam_step.hpp"

namespace ddp::optim::detail {
namespace {

/// Whether `a` and `b` hold their elements in the same order in memory.
bool laid_out_alike(const at::Tensor& a, const at::Tensor& b) {
  return a.sizes() == b.sizes() &&
         (a.strides() == b.strides() || (a.is_contiguous() && b.is_contiguous()));
}

/// Whether `t` is a dense CPU tensor of `p`'s dtype, laid out as `p`.
bool fusable_beside(const at::Tensor& p, const at::Tensor& t) {
  return t.device().is_cpu() && t.layout() == c10::kStrided && t.scalar_type() == p.scalar_type() &&
         t.is_non_overlapping_and_dense() && laid_out_alike(p, t);
}

}  // namespace

bool adam_fusable(const at::Tensor& p, const at::Tensor& exp_avg, const at::Tensor& exp_avg_sq,
                  const at::Tensor& max_exp_avg_sq, bool amsgrad) {
  const auto dtype = p.scalar_type();
  if (!p.device().is_cpu() || p.layout() != c10::kStrided || !p.is_non_overlapping_and_dense() ||
      (dtype != at::kFloat && dtype != at::kDouble))
    return false;
  if (!fusable_beside(p, p.grad())) return false;
  for (const at::Tensor* state : {&exp_avg, &exp_avg_sq})
    if (state->defined() && !fusable_beside(p, *state)) return false;
  if (amsgrad && !(max_exp_avg_sq.defined() && fusable_beside(p, max_exp_avg_sq))) return false;
  return true;
}

}  // namespace ddp::optim::detail

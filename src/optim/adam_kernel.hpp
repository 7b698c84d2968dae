#pragma once

// Internal: the one pass over memory that Adam's and AdamW's fused steps
// make per parameter (Note [One pass per parameter] in ddp/optim/adamw.hpp).

#include <cstdint>

namespace ddp::optim::detail {

/// The scalars of one parameter's step, each already in the parameter's
/// dtype T as ATen converts a Scalar to the tensor's dtype before the
/// elementwise operation that uses it.
template <typename T>
struct AdamScalars {
  T beta1;                  ///< exp_avg.mul_(beta1)
  T one_minus_beta1;        ///< .add_(grad, 1 - beta1)
  T beta2;                  ///< exp_avg_sq.mul_(beta2)
  T one_minus_beta2;        ///< .addcmul_(grad, grad, 1 - beta2)
  T bias_correction2_sqrt;  ///< / sqrt(bias_correction2)
  T eps;                    ///< .add_(eps)
  T negative_step_size;     ///< p.addcdiv_(exp_avg, denom, -lr / bias_correction1)
  T decay;                  ///< AdamW: p.mul_(1 - lr * weight_decay)
  T weight_decay;           ///< Adam: grad.add(p, weight_decay)
  bool decoupled_decay;     ///< AdamW's decay (else Adam's, when weight_decay != 0)
  bool has_weight_decay;    ///< weight_decay != 0
  bool amsgrad;             ///< max_exp_avg_sq is given and used
};

/// Updates n elements in place: param, exp_avg, exp_avg_sq and, with
/// amsgrad, max_exp_avg_sq (else null), reading grad; each element with the
/// operations of LibTorch's step, in its order and rounding (Note [Same
/// rounding as LibTorch's Adam]). Splits n across LibTorch's intra-op
/// threads.
template <typename T>
void adam_update(const AdamScalars<T>& s, T* param, const T* grad, T* exp_avg, T* exp_avg_sq,
                 T* max_exp_avg_sq, int64_t n);

extern template void adam_update<float>(const AdamScalars<float>&, float*, const float*, float*,
                                        float*, float*, int64_t);
extern template void adam_update<double>(const AdamScalars<double>&, double*, const double*,
                                         double*, double*, double*, int64_t);

}  // namespace ddp::optim::detail

#pragma once

/// \file adam.hpp
/// Adam (with L2 weight decay, as torch::optim::Adam) whose step makes one
/// pass over memory per parameter: ddp::optim::AdamW's fused step (Note [One
/// pass per parameter] in ddp/optim/adamw.hpp) with Adam's weight decay, the
/// gradient's `grad + weight_decay * p`, in place of AdamW's decay of the
/// parameter. The same options, state and serialization as
/// torch::optim::Adam, and its values bit for bit on CPU.
///
/// \code
///   ddp::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(1e-3));
/// \endcode

#include <torch/optim/adam.h>

namespace ddp::optim {

/// torch::optim::Adam with a fused step; LibTorch's step where some
/// parameter cannot take it (Note [When LibTorch's step runs instead] in
/// ddp/optim/adamw.hpp).
class Adam : public torch::optim::Adam {
 public:
  /// torch::optim::Adam's constructors.
  /// \throws c10::Error for the options torch::optim::Adam refuses.
  using torch::optim::Adam::Adam;

  /// torch::optim::Adam::step's values, one pass per parameter.
  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace ddp::optim

#include "ddp/optim/adam.hpp"

#include <torch/torch.h>

#include "optim/adam_step.hpp"

namespace ddp::optim {

torch::Tensor Adam::step(LossClosure closure) {
  return detail::adam_step<torch::optim::AdamOptions, torch::optim::AdamParamState>(
      param_groups_, state_, /*decoupled=*/false, closure,
      [this] { torch::optim::Adam::step(nullptr); });  // the closure has run
}

}  // namespace ddp::optim

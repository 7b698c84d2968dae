#include "ddp/optim/adamw.hpp"

#include <torch/torch.h>

#include "optim/adam_step.hpp"

namespace ddp::optim {

torch::Tensor AdamW::step(LossClosure closure) {
  return detail::adam_step<torch::optim::AdamWOptions, torch::optim::AdamWParamState>(
      param_groups_, state_, /*decoupled=*/true, closure,
      [this] { torch::optim::AdamW::step(nullptr); });  // the closure has run
}

}  // namespace ddp::optim

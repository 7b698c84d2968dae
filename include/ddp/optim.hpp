#pragma once

/// \file optim.hpp
/// ddp's optimizers in one include (namespace ddp::optim, beside
/// torch::optim): SGD with a multi-tensor step, Adam and AdamW with a fused one.

#include "ddp/optim/adam.hpp"   // IWYU pragma: export
#include "ddp/optim/adamw.hpp"  // IWYU pragma: export
#include "ddp/optim/sgd.hpp"    // IWYU pragma: export

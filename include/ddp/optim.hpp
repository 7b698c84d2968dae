#pragma once

/// \file optim.hpp
/// ddp's optimizers in one include (namespace ddp::optim, beside
/// torch::optim): SGD with a multi-tensor step.

#include "ddp/optim/sgd.hpp"  // IWYU pragma: export

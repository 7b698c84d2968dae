#pragma once

/// \file broadcast.hpp
/// Horovod's start-of-training broadcasts: make every rank's model and
/// optimizer equal to one rank's, e.g. after rank 0 restored a checkpoint.
///
/// \code
///   ddp::hvd::broadcast_parameters(*model, 0);
///   ddp::hvd::broadcast_optimizer_state(optimizer, 0);
/// \endcode

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <memory>
#include <vector>

#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::hvd {

/// Copies rank `root`'s parameters and buffers (its state dict) into
/// `module` on every rank. The module must have the same parameters and
/// buffers (names, shapes, dtypes) on every rank. One collective per device
/// carries them all.
/// \param group null: the group of hvd::init().
/// \throws InvalidArgumentError naming the first tensor that differs
///   between ranks; ConfigError without a group.
void broadcast_parameters(torch::nn::Module& module, int root = 0,
                          std::shared_ptr<ProcessGroup> group = nullptr);

/// Copies rank `root`'s values into `tensors` on every rank (Horovod's
/// broadcast_parameters(list of tensors)). The lists must match in length,
/// shapes and dtypes across ranks.
void broadcast_parameters(const std::vector<at::Tensor>& tensors, int root = 0,
                          std::shared_ptr<ProcessGroup> group = nullptr);

/// Makes `optimizer` on every rank equal to rank `root`'s: every group's
/// hyper-parameters (learning rate, betas, momentum, weight decay, eps, ...)
/// and every parameter's state tensors and step count. A rank whose
/// optimizer has no state yet (step() never called) gets the state created;
/// a parameter without state on `root` ends without state everywhere.
/// Supports SGD, Adam, AdamW, RMSprop and Adagrad; the optimizers must have
/// the same type and parameter shapes on every rank.
/// \throws InvalidArgumentError for another optimizer type, or when ranks
///   differ (names the difference); ConfigError without a group.
void broadcast_optimizer_state(torch::optim::Optimizer& optimizer, int root = 0,
                               std::shared_ptr<ProcessGroup> group = nullptr);

}  // namespace ddp::hvd

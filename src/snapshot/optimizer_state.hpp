#pragma once

// Internal: an optimizer's and a learning-rate scheduler's state as named
// tensors plus a JSON description, and back.
//
// Note [Optimizer state by position]
// LibTorch keys an optimizer's per-parameter state by the address of the
// parameter's TensorImpl, which means nothing in another process. A snapshot
// therefore names state by position instead: tensor `optim/g<G>/p<I>/<field>`
// belongs to parameter I of param group G. The JSON description is
//   {"type": "adam", "defaults": {options},
//    "groups": [{"options": {...}, "params": 3, "state": [{"step": 5}, null, ...]}]}
// where null means "no state yet" (SGD before its first step with momentum)
// and "step" appears for the optimizers that count steps. Every option of
// every group is saved, so a learning rate changed by a scheduler comes back.

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>
#include <torch/optim/schedulers/lr_scheduler.h>
#include <nlohmann/json.hpp>

#include <map>
#include <string>

namespace ddp::snapshot::detail {

using TensorMap = std::map<std::string, at::Tensor>;

/// "optim/g<G>/p<I>/": where the state records of parameter `index` of
/// group `group` start (Note [Optimizer state by position]).
std::string optimizer_state_prefix(size_t group, size_t index);

/// The state records of parameter `index` of group `group` in `tensors`, by
/// field ("exp_avg", "momentum_buffer", ...).
TensorMap optimizer_state_fields(const TensorMap& tensors, size_t group, size_t index);

/// Adds the state of `optimizer` to `tensors` and returns its description.
/// Throws SnapshotError naming the optimizer's type when it is not SGD,
/// Adam, AdamW, RMSprop or Adagrad.
nlohmann::json export_optimizer(const torch::optim::Optimizer& optimizer, TensorMap& tensors);

/// Throws SnapshotError (prefixed with `where`) naming the first way in
/// which `description` and the `optim/...` entries of `tensors` do not fit
/// `optimizer`: another type, other group or parameter counts, a missing,
/// extra or differently shaped state tensor, a malformed option.
void check_optimizer(const std::string& where, const nlohmann::json& description,
                     const TensorMap& tensors, const torch::optim::Optimizer& optimizer);

/// Replaces every group's options and every parameter's state of
/// `optimizer` with the snapshot's (already checked by check_optimizer()).
void import_optimizer(const nlohmann::json& description, const TensorMap& tensors,
                      torch::optim::Optimizer& optimizer);

/// The number of step() calls a scheduler has made (LRScheduler::step_count_).
///
/// Note [The scheduler's step count]
/// LibTorch (1.13 and 2.x) keeps it in the protected member step_count_ and
/// offers no accessor. It is reached through a pointer to member formed in a
/// derived class, which C++ permits without any undefined behaviour. The
/// learning rates themselves live in the optimizer's options.
unsigned scheduler_step_count(const torch::optim::LRScheduler& scheduler);
/// Sets the step count read by scheduler_step_count().
void set_scheduler_step_count(torch::optim::LRScheduler& scheduler, unsigned count);

}  // namespace ddp::snapshot::detail

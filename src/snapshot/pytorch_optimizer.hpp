#pragma once

// Internal: an optimizer's state between ddp's snapshot layout (Note
// [Optimizer state by position] in src/snapshot/optimizer_state.hpp) and
// PyTorch's Optimizer.state_dict() layout (Note [A checkpoint for PyTorch]
// in ddp/snapshot/pytorch_checkpoint.hpp). The two differ only in how they
// name a parameter: (group, position) here, an index counted across the
// groups there; the option and state names are PyTorch's in both.

#include <torch/optim/optimizer.h>
#include <nlohmann/json.hpp>

#include <string>

#include "ddp/formats/py_value.hpp"
#include "snapshot/optimizer_state.hpp"

namespace ddp::snapshot::detail {

using formats::PyRef;
using formats::PyValue;

/// PyTorch's optimizer state_dict from a snapshot's optimizer description
/// and its `optim/...` tensors.
PyRef optimizer_to_pytorch(const nlohmann::json& description, const TensorMap& tensors);

/// The snapshot layout of a PyTorch optimizer state_dict (`state_dict`,
/// read from `where`), for check_optimizer() and import_optimizer() against
/// `optimizer`: its `optim/...` tensors go into `tensors`.
/// \throws SnapshotError naming `where` and the problem: not an optimizer
///   state_dict, the options of another optimizer type than `optimizer`'s,
///   an option LibTorch cannot honour (maximize), a state of a parameter
///   index no group lists.
nlohmann::json optimizer_from_pytorch(const std::string& where, const PyValue& state_dict,
                                      const torch::optim::Optimizer& optimizer, TensorMap& tensors);

}  // namespace ddp::snapshot::detail

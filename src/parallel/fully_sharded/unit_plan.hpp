#pragma once

// Internal: which parameters make FullyShardedDataParallel's units (Note
// [Where the units come from] in ddp/parallel/fully_sharded_units.hpp).

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <string>
#include <vector>

#include "ddp/parallel/fully_sharded_units.hpp"
#include "ddp/parallel/wrapped_module.hpp"

namespace ddp::parallel::detail {

// The units in registration order, then the root's parameters, if any, as
// unit 0 (Note [Where the units come from]); each parameter once, with the
// other names it has (a tied one, a module registered twice).
struct UnitPlan {
  std::vector<std::string> names;
  std::vector<const torch::nn::Module*> modules;  // null for the root
  std::vector<std::vector<std::string>> parameter_names;
  std::vector<std::vector<at::Tensor>> parameters;
  std::vector<std::vector<std::vector<std::string>>> aliases;  // per unit, per parameter
  int root = -1;
};

/// The units of `module` under `policy`.
/// \throws ConfigError for a parameter shared by two units, or by a unit
///   and the root (a tie across them).
UnitPlan plan_units(const WrappedModule& module, const WrapPolicy& policy);

}  // namespace ddp::parallel::detail

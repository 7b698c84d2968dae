#pragma once

// DistributedDataParallel around the modules users have (Note [Wrapping any
// module] in ddp/parallel/wrapped_module.hpp): Sequential models, a
// ModuleList-driven model, outputs that are a tuple or a struct of tensors
// (Note [Finding the tensors in an output]). Each trained on every rank of
// a real process group against one process on the concatenated batch.

#include <memory>
#include <set>
#include <string>

#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::testing {

/// Runs every check below on `group`, printing each by name; returns how
/// many failed.
int check_any_module(const std::shared_ptr<ProcessGroup>& group);

/// The names of check_any_module()'s checks.
namespace any_module_check {
inline const std::string kGanDiscriminator =
    "GAN of two Sequential models with SyncBatchNorm: discriminator matches one process";
inline const std::string kGanGenerator =
    "GAN of two Sequential models with SyncBatchNorm: generator matches one process";
inline const std::string kGanBuffers =
    "GAN of two Sequential models with SyncBatchNorm: running statistics match one process";
inline const std::string kLstm = "LSTM returning its tuple matches one process";
inline const std::string kAuxiliary =
    "ModuleList model returning logits and an auxiliary loss (a struct) matches one process";
inline const std::string kAuxiliaryUnused =
    "auxiliary head of the struct output unused on some steps matches one process";
inline const std::string kOtherType =
    "forward asked for a Tensor of a module returning a tuple names both types";
}  // namespace any_module_check

/// The names check_any_module() reports.
inline std::set<std::string> any_module_check_names() {
  using namespace any_module_check;  // NOLINT(google-build-using-namespace)
  return {kGanDiscriminator, kGanGenerator,    kGanBuffers, kLstm,
          kAuxiliary,        kAuxiliaryUnused, kOtherType};
}

}  // namespace ddp::testing

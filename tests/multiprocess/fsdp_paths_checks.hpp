#pragma once

// FullyShardedDataParallel on the paths next to the tested ones (issue
// #54): a unit called outside sharded_call, an exception in backward, a
// gradient penalty, branches skipped under NoGradGuard or by every rank, a
// frozen unit in the middle, units run in another order than registered, a
// tie between a unit and the root, one module under two names.
// Each run on every rank of a real group by ddp_test_worker, against one
// process or a named error.

#include <memory>
#include <set>
#include <string>

#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::testing {

/// Runs every check below on `group`; returns how many failed.
int check_fsdp_paths(const std::shared_ptr<ProcessGroup>& group);
/// The mixed-precision ones (fsdp_mixed_precision_checks.cpp), which
/// check_fsdp_paths() runs too.
int check_fsdp_mixed_precision_paths(const std::shared_ptr<ProcessGroup>& group);

/// The module's parameters between steps (fsdp_between_steps_checks.cpp),
/// which check_fsdp_paths() runs too.
int check_fsdp_between_steps_paths(const std::shared_ptr<ProcessGroup>& group);
/// A parameter unused inside a unit (fsdp_unused_parameter_checks.cpp),
/// which check_fsdp_paths() runs too.
int check_fsdp_unused_parameter_paths(const std::shared_ptr<ProcessGroup>& group);
/// One module under two names (fsdp_shared_module_checks.cpp), which
/// check_fsdp_paths() runs too.
int check_fsdp_shared_module_paths(const std::shared_ptr<ProcessGroup>& group);
/// Ranks that disagree on the units they run, without find_unused_units:
/// in the first training forward every rank gets a ConfigError naming both
/// units; in a later step the rank that skips one gets it, and (the group
/// broken by its leaving) the other an ddp::Error, never an abort. Ends the
/// group: a worker scenario of its own.
int check_fsdp_skipped_unit(const std::shared_ptr<ProcessGroup>& group);

namespace fsdp_paths_check {
inline const std::string kDirectCall =
    "a unit called without sharded_call is a ConfigError naming it, with prefetch 1 and 0, and "
    "the next steps match one process";
inline const std::string kBackwardException =
    "after an exception in backward, the next steps match one process that skipped the batch, "
    "and nothing stays gathered";
inline const std::string kGradientPenalty =
    "a gradient penalty (autograd::grad with create_graph) matches one process";
inline const std::string kNoGradBranch =
    "a branch run only under NoGradGuard keeps no gradient and AdamW leaves it as it was";
inline const std::string kEveryRankSkips =
    "a unit no rank runs, without find_unused_units, is a ConfigError naming it and "
    "find_unused_units";
inline const std::string kFrozenMiddle =
    "a frozen unit between trainable ones matches one process and is freed between steps";
inline const std::string kForwardOrder =
    "units run in reverse registration order match one process, prefetch and reduce in that "
    "order, and stay within two units' parameters and one unit's gradient";
inline const std::string kTieWithRoot =
    "a parameter tied between a unit and the root is a ConfigError at construction naming both "
    "names";
inline const std::string kSiamese =
    "one module registered under two names is one unit under its first name, whichever name, "
    "type or size the policy picks it by, called twice per forward, matches one process with SGD "
    "and AdamW, and full_parameters() names it under both";
inline const std::string kMixedPrecisionUnits =
    "bf16 param_dtype with fp32 computed between units and a BatchNorm unit stays within bf16's "
    "precision of one process in fp32, statistics included, kept in fp32";
inline const std::string kMixedPrecisionMasters =
    "bf16 param_dtype exports the fp32 masters: each of this rank's pieces is its part of "
    "full_parameters(), bit for bit";
inline const std::string kMixedPrecisionNoSync =
    "bf16 param_dtype accumulates no_sync gradients in fp32, and the step equals one synchronized "
    "backward on the sum within bf16's precision";
inline const std::string kMixedPrecisionForwardBetween =
    "bf16 param_dtype with a BatchNorm unit: a forward under NoGradGuard between a training "
    "forward and its backward leaves that backward's result as it was, bit for bit";
inline const std::string kMixedPrecisionRootInput =
    "bf16 param_dtype with a root layer fed an fp32 tensor the forward made is a ConfigError "
    "naming param_dtype and the cast, and the step after, with the cast, equals a model that "
    "cast from the start, bit for bit";
inline const std::string kBetweenSteps =
    "between steps, reading the module's parameters (sum, clone, printing, a unit's forward, "
    "torch::save of the module) is a ConfigError saying what to use, naming the parameter where "
    "the operation has it, and the steps after match one process";
inline const std::string kRawStorageLayers =
    "an Embedding and a LayerNorm unit called directly between steps are a ConfigError naming "
    "exactly the parameters the operation read and sharded_call, in 20 rounds each just after "
    "placeholders came and went, never a crash";
inline const std::string kKeptGradient =
    "a piece's .grad kept by the caller across gradients set to none keeps its values through the "
    "next step, the pieces' gradient buffers are reused otherwise, and the steps match one process";
inline const std::string kUnusedInsideUnit =
    "with find_unused_units, a parameter no rank used in a step inside a unit that ran keeps no "
    "gradient, AdamW leaves it bit for bit, and the steps (branch taken by every rank, none, one) "
    "match one process";
inline const std::string kFirstForwardDiffers =
    "ranks running different units in the first forward get a ConfigError naming both";
inline const std::string kLaterStepSkip =
    "a rank skipping a unit in a later step gets a ConfigError naming it and find_unused_units, "
    "and its peer a ddp::Error";
}  // namespace fsdp_paths_check

inline std::set<std::string> fsdp_paths_check_names() {
  using namespace fsdp_paths_check;  // NOLINT(google-build-using-namespace)
  return {kDirectCall,
          kBackwardException,
          kGradientPenalty,
          kNoGradBranch,
          kEveryRankSkips,
          kFrozenMiddle,
          kForwardOrder,
          kTieWithRoot,
          kSiamese,
          kMixedPrecisionUnits,
          kMixedPrecisionMasters,
          kMixedPrecisionNoSync,
          kMixedPrecisionForwardBetween,
          kMixedPrecisionRootInput,
          kBetweenSteps,
          kRawStorageLayers,
          kKeptGradient,
          kUnusedInsideUnit};
}

inline std::set<std::string> fsdp_skipped_unit_check_names() {
  using namespace fsdp_paths_check;  // NOLINT(google-build-using-namespace)
  return {kFirstForwardDiffers, kLaterStepSkip};
}

}  // namespace ddp::testing

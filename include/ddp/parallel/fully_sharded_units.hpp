#pragma once

/// \file fully_sharded_units.hpp
/// How FullyShardedDataParallel finds its units: wrap policies, and
/// sharded_call() for a unit inside a custom module's forward.
///
/// \code
///   struct StackImpl : torch::nn::Module {
///     torch::nn::ModuleList blocks{register_module("blocks", torch::nn::ModuleList())};
///     torch::Tensor forward(torch::Tensor x) {
///       for (const auto& block : *blocks) {
///         auto linear = std::dynamic_pointer_cast<torch::nn::LinearImpl>(block);
///         x = ddp::sharded_call(linear, x);  // was: linear->forward(x)
///       }
///       return x;
///     }
///   };
/// \endcode

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ddp/parallel/output_tensors.hpp"

namespace ddp::parallel {

// Note [Where the units come from]
// LibTorch modules have no forward hooks, so FullyShardedDataParallel must
// run the unit boundaries itself. Three ways, each for a reason:
// - A torch::nn::Sequential is run entry by entry (as Sequential::forward
//   does), and each entry with parameters is a unit: the model's code does
//   not change.
// - In a custom module, a wrap_policy picks the unit submodules (by type,
//   wrap_by_type<BlockImpl>(), or by size, wrap_by_parameter_count(n)), and
//   the module's forward calls each through ddp::sharded_call(block, x)
//   instead of block(x): the one line that lets the wrapper gather before
//   the call and hook the output after it. A ModuleList of blocks is the
//   usual case. Outside a sharded forward, sharded_call is a plain call.
// - Without a policy, any other module is one unit (ZeRO-3 at rest:
//   sharded between steps, gathered for the step).
// Parameters outside every unit form the root unit, gathered for the whole
// forward and backward (embeddings and a head, tied or not).

/// Picks the unit submodules: called with each submodule's qualified name
/// and the module, outermost first.
using WrapPolicy = std::function<bool(const std::string& name, const torch::nn::Module& module)>;

/// A wrap_policy that picks every submodule of type `Impl` (e.g. a
/// transformer block's Impl class).
template <typename Impl>
WrapPolicy wrap_by_type() {
  return [](const std::string&, const torch::nn::Module& module) {
    return dynamic_cast<const Impl*>(&module) != nullptr;
  };
}

/// A wrap_policy that picks every submodule holding at least `parameters`
/// parameter elements (its descendants included), as FSDP's
/// size_based_auto_wrap_policy.
WrapPolicy wrap_by_parameter_count(int64_t parameters);

class FullyShardedDataParallelImpl;

namespace detail {
/// The unit of the sharded forward running on this thread that `module` is,
/// gathered and ready to run; -1 when none is running or `module` is no unit.
int enter_unit(const torch::nn::Module* module);
/// Ends unit `unit` of the running sharded forward with its output tensors.
void leave_unit(int unit, std::vector<at::Tensor>& outputs);
/// A floating-point argument of unit `unit` (>= 0) in the running sharded
/// forward's param_dtype (mixed precision casts each unit's inputs, as
/// FSDP2's MixedPrecisionPolicy); as it is otherwise.
at::Tensor unit_input(int unit, const at::Tensor& tensor);
template <typename T>
decltype(auto) unit_argument(int unit, T&& value) {
  if constexpr (std::is_same_v<std::decay_t<T>, at::Tensor>) {
    return unit_input(unit, value);
  } else {
    return std::forward<T>(value);
  }
}

// Note [Checkpointed units]
// ddp::nn::checkpoint runs its function twice: in the forward under no
// grad, and again in backward to differentiate it. A unit called inside
// (sharded_call) is gathered for the first run as any unit, and resharded
// after it (it leaves nothing for backward), except with find_unused_units,
// which holds every unit until its reduction. The second run happens in
// the backward, where no sharded forward runs on the thread: so the first
// keeps a reference to the sharded forward it ran in, and the second makes
// that wrapper the one sharded_call() finds, in recompute mode: entering a
// unit is then what the gradient reaching its output does without
// checkpointing (gathered again, prefetched while the unit after it ran
// its backward, the units before it prefetched), so every rank issues the
// same gathers at the same points, and the unit's gathered bytes count in
// memory()'s peak. Its gradient buffer is not set up then (except under
// no_sync, which accumulates into it): the recompute's autograd::grad hands
// the engine all of the unit's gradients at once, which it keeps as the
// parameters' .grad, and they move into the buffer when the unit's
// reduction starts, so that the unit's gradient is never held twice
// (memory() counts them meanwhile). Its reduction is the usual one, when
// its gradients have been accumulated by the outer backward. A whole FullyShardedDataParallel
// forward inside a checkpoint is refused: its units would run the first time under no grad, as for
// evaluation, with no backward to prepare for.

/// What a checkpointed function keeps of the sharded forward it ran in.
struct ShardedForwardRef;

/// Set by ddp::nn::checkpoint around each run of its function: the
/// forward's (`recompute_of` null) takes a reference to the sharded forward
/// running on this thread, if any; the recompute's gives that reference
/// back to sharded_call() (Note [Checkpointed units]).
class CheckpointedRun {
 public:
  /// \throws ConfigError when `recompute_of`'s wrapper was destroyed.
  explicit CheckpointedRun(std::shared_ptr<const ShardedForwardRef> recompute_of = nullptr);
  ~CheckpointedRun();
  CheckpointedRun(const CheckpointedRun&) = delete;
  CheckpointedRun& operator=(const CheckpointedRun&) = delete;
  /// The forward's: the sharded forward it runs in, or null.
  const std::shared_ptr<const ShardedForwardRef>& sharded_forward() const { return forward_; }

 private:
  std::shared_ptr<const ShardedForwardRef> forward_;
  FullyShardedDataParallelImpl* previous_active_;
  bool previous_recomputing_;
};
}  // namespace detail

/// Calls `module->forward(args...)` as a unit of the sharded forward that
/// runs it, if any (Note [Where the units come from]): `module` is a holder
/// or a shared_ptr of a unit picked by the wrap_policy. Under a param_dtype
/// its floating-point Tensor arguments are cast to it.
template <typename ModuleType, typename... Args>
auto sharded_call(ModuleType& module, Args&&... args)
    -> decltype(module->forward(std::forward<Args>(args)...)) {
  const int unit = detail::enter_unit(module.get());
  auto output = module->forward(detail::unit_argument(unit, std::forward<Args>(args))...);
  if (unit >= 0) {
    std::vector<at::Tensor> tensors;
    collect_output_tensors(output, tensors);
    detail::leave_unit(unit, tensors);
  }
  return output;
}

}  // namespace ddp::parallel

namespace ddp {
using namespace parallel;  // Note [One namespace per layer] in ddp/ddp.hpp
}  // namespace ddp

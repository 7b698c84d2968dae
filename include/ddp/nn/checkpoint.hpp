#pragma once

/// \file checkpoint.hpp
/// Activation checkpointing, as PyTorch's `torch.utils.checkpoint`, which
/// LibTorch lacks (pytorch#52744): a block runs its forward without keeping
/// its activations and runs it again in backward to differentiate it.
///
/// \code
///   std::vector<torch::nn::Linear> blocks{torch::nn::Linear(8, 8), torch::nn::Linear(8, 8)};
///   torch::Tensor h = torch::randn({4, 8}, torch::requires_grad());
///   for (const auto& block : blocks) h = ddp::nn::checkpoint(block, h);
///   h.sum().backward();  // each block's forward runs again here
/// \endcode

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <functional>
#include <type_traits>
#include <utility>
#include <vector>

#include "ddp/parallel/fully_sharded_units.hpp"

namespace ddp::nn {

/// What checkpoint() runs, twice: tensors in, tensors out.
using CheckpointedFunction =
    std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>& inputs)>;

namespace detail {
template <typename T, typename = void>
struct IsModuleHolder : std::false_type {};
template <typename T>
struct IsModuleHolder<T, std::void_t<decltype(std::declval<const T&>().ptr())>> : std::true_type {};
std::vector<at::Tensor> checkpoint_function(const CheckpointedFunction& function,
                                            const std::vector<at::Tensor>& inputs,
                                            const std::vector<at::Tensor>& parameters,
                                            const std::vector<at::Tensor>& buffers);
}  // namespace detail

/// Runs `function` on `inputs` without keeping what its backward would
/// need, and returns its outputs; their backward runs `function` again
/// on the same inputs, with the random number generators as they were
/// (a dropout draws the same mask), and differentiates it. `parameters`
/// are the trainable tensors `function` reads besides its inputs (a
/// module's parameters, each tensor counted once): they get their
/// gradients through this call's node in the graph, as the inputs do.
/// `buffers` are those `function` updates (BatchNorm's running
/// statistics): the recompute's updates are undone, so they are updated
/// once, as without checkpointing.
///
/// Note [Activation checkpointing]
/// The forward keeps the inputs and the random number generators' states
/// (CPU, and the default generator of each CUDA device an input is on),
/// nothing else. The backward runs the function again under grad mode and
/// takes torch::autograd::grad of its outputs with respect to the inputs
/// that require grad and `parameters`, and hands those gradients to the
/// engine as this node's: a parameter's gradient is accumulated by the
/// engine of the outer backward, once, so hooks on the parameters'
/// gradient accumulators (DistributedDataParallel's) fire as without
/// checkpointing, and an outer torch::autograd::grad(outputs, inputs)
/// works (PyTorch's reentrant variant refuses it, as it accumulates into
/// .grad from the inner backward instead). Gradients are bit for bit the
/// ones without checkpointing when the function is deterministic given its
/// inputs and the generators' states. Under create_graph the recomputed
/// graph is kept, so a gradient penalty differentiates through it. Under
/// NoGradGuard the function simply runs. A FullyShardedDataParallel unit
/// called inside (sharded_call) is gathered again for the recompute (Note
/// [Checkpointed units] in ddp/parallel/fully_sharded_units.hpp).
///
/// \throws ConfigError when grad mode is on and neither an input nor a
///   parameter requires grad (a function's parameters not passed would
///   otherwise get no gradient, silently), when `function` returns no
///   tensor or an undefined one, or when `parameters` holds an undefined
///   tensor; the ConfigError of FullyShardedDataParallel for a whole
///   sharded forward inside `function`.
template <typename Function, typename = std::enable_if_t<!detail::IsModuleHolder<Function>::value>>
std::vector<at::Tensor> checkpoint(const Function& function, const std::vector<at::Tensor>& inputs,
                                   const std::vector<at::Tensor>& parameters = {},
                                   const std::vector<at::Tensor>& buffers = {}) {
  return detail::checkpoint_function(CheckpointedFunction(function), inputs, parameters, buffers);
}

/// The trainable parameters of `module` and its descendants, each tensor
/// once (LibTorch 1.13 lists a tied one under each name).
std::vector<at::Tensor> trainable_parameters(const torch::nn::Module& module);

/// A module's forward on one tensor, checkpointed: `checkpoint(block, x)`
/// equals `ddp::sharded_call(block, x)` (so `block->forward(x)` outside a
/// FullyShardedDataParallel forward) with its activations recomputed in
/// backward. Its trainable parameters (trainable_parameters()) are
/// `parameters`, its buffers `buffers`.
template <typename ModuleHolder,
          typename = std::enable_if_t<detail::IsModuleHolder<ModuleHolder>::value>>
at::Tensor checkpoint(const ModuleHolder& module, const at::Tensor& input) {
  auto impl = module.ptr();
  CheckpointedFunction run = [impl](const std::vector<at::Tensor>& in) {
    return std::vector<at::Tensor>{parallel::sharded_call(impl, in.front())};
  };
  return detail::checkpoint_function(run, {input}, trainable_parameters(*impl), impl->buffers())
      .front();
}

}  // namespace ddp::nn

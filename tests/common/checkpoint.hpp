#pragma once

// Reentrant activation checkpointing for tests, as PyTorch's
// torch.utils.checkpoint(use_reentrant=True), which LibTorch lacks: the
// forward runs without recording a graph; the backward recomputes the
// segment with grad enabled and runs a nested (reentrant) backward through
// it, so the segment's parameters receive their gradients inside that inner
// pass. A segment applied twice makes its parameters' gradient hooks run
// twice per iteration, which DistributedDataParallel handles only with
// static_graph.

#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/functions/utils.h>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <utility>

namespace ddp::testing {

namespace detail {

// The backward node of one checkpointed segment.
struct CheckpointBackward : torch::autograd::Node {
  CheckpointBackward(std::function<torch::Tensor(const torch::Tensor&)> segment,
                     const torch::Tensor& input)
      : segment(std::move(segment)),
        input(input.detach()),
        input_requires_grad(input.requires_grad()) {}

  torch::autograd::variable_list apply(torch::autograd::variable_list&& grads) override {
    torch::Tensor leaf = input.detach().requires_grad_(input_requires_grad);
    torch::Tensor output;
    {
      torch::AutoGradMode enable(true);
      output = segment(leaf);
    }
    torch::autograd::backward({output}, {grads[0]});  // the reentrant pass
    return {input_requires_grad ? leaf.grad() : torch::Tensor()};
  }

  std::function<torch::Tensor(const torch::Tensor&)> segment;
  torch::Tensor input;
  bool input_requires_grad;
};

}  // namespace detail

/// segment(input), recomputed during backward instead of storing its
/// activations.
inline torch::Tensor checkpoint(std::function<torch::Tensor(const torch::Tensor&)> segment,
                                const torch::Tensor& input) {
  torch::Tensor output;
  {
    torch::NoGradGuard no_grad;
    output = segment(input);
  }
  if (!torch::GradMode::is_enabled()) return output;
  auto node = std::shared_ptr<detail::CheckpointBackward>(
      new detail::CheckpointBackward(segment, input), torch::autograd::deleteNode);
  node->set_next_edges(torch::autograd::collect_next_edges(input));
  torch::autograd::set_history(output, node);
  return output;
}

}  // namespace ddp::testing

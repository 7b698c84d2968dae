#pragma once

/// \file sgd.hpp
/// SGD with momentum, dampening, weight decay and Nesterov momentum whose
/// step updates a list of parameters per ATen call (the multi-tensor
/// "foreach" operators), as PyTorch's `torch.optim.SGD(..., foreach=True)`
/// does, where LibTorch's torch::optim::SGD makes its calls once per
/// parameter. The same values on CPU, bit for bit, and the same options,
/// state and serialization as torch::optim::SGD.
///
/// \code
///   ddp::DistributedDataParallel model(net, group);
///   ddp::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
///   optimizer.zero_grad();
///   torch::nll_loss(model->forward(x), y).backward();
///   optimizer.step();
/// \endcode
///
/// \code
///   // The same optimizer on each rank's shard under ZeRO.
///   ddp::ZeroRedundancyOptimizer sharded(
///       net->parameters(), ddp::zero_optimizer<ddp::optim::SGD>(torch::optim::SGDOptions(0.1)),
///       group);
/// \endcode

#include <ATen/core/Tensor.h>
#include <torch/optim/sgd.h>

namespace ddp::optim {

/// torch::optim::SGD (the same constructors, torch::optim::SGDOptions per
/// param group, torch::optim::SGDParamState per parameter) with a step of
/// multi-tensor operators.
///
/// Note [A subclass of torch::optim::SGD]
/// ddp::optim::SGD derives from torch::optim::SGD and overrides step()
/// only. So it *is* a torch::optim::SGD: its options, param groups, state
/// map (the same keys, one SGDParamState with its momentum_buffer per
/// parameter that has one), save() and load() (torch::save and torch::load
/// of the optimizer) are LibTorch's own. State saved by either optimizer
/// loads into the other, and what takes a torch::optim::Optimizer or
/// recognizes an SGD by its type works unchanged: ddp::snapshot's optimizer
/// records, ddp::ZeroRedundancyOptimizer with `zero_optimizer<ddp::optim::
/// SGD>` (and its state_bytes()), LibTorch's learning-rate schedulers. A
/// separate class would have had to copy the options and state types, and
/// each of those users would have had to learn them. The price: LibTorch's
/// SGD has no hook for the update itself, so step() repeats its order of
/// operations (Note [Same operations as LibTorch's step]), and a LibTorch
/// that changes its SGD's arithmetic must be followed here; the tests
/// compare the two bit for bit.
///
/// Note [Same operations as LibTorch's step]
/// torch::optim::SGD::step does, per parameter p with a gradient, in this
/// order: d_p = grad; with weight decay d_p = d_p.add(p, weight_decay);
/// with momentum, on the first step buf = clone(d_p).detach() (stored as
/// the parameter's momentum_buffer), later buf.mul_(momentum).add_(d_p,
/// 1 - dampening), then d_p = d_p.add(buf, momentum) with Nesterov, else
/// d_p = buf; finally p.add_(d_p, -lr). This step makes the same calls on
/// lists: per param group and per (device, dtype) of its parameters, one
/// at::_foreach_add (weight decay), at::_foreach_mul_ and at::_foreach_add_
/// (the momentum buffers that exist; a missing one is cloned, as LibTorch
/// does), at::_foreach_add (Nesterov) and at::_foreach_add_ (the update),
/// with the same scalars. On CPU each foreach operator applies the
/// per-tensor operator to each element of its lists, so the values are
/// LibTorch's bit for bit; on CUDA one kernel covers many tensors (what
/// PyTorch's foreach SGD runs), and its rounding may differ in the last
/// bit. The number of ATen calls a step makes at the top level no longer
/// grows with the number of parameters (5 at most per list, against up to
/// 5 per parameter). One difference beyond the values: the parameters are
/// written in place as PyTorch's SGD writes them, so their version
/// counters advance (LibTorch's writes through .data(), which leaves them).
///
/// Note [Steps taken per parameter]
/// Two cases take LibTorch's per-parameter step (torch::optim::SGD::step)
/// for the whole step instead, after the closure has run: a gradient that
/// is not strided (sparse, from an Embedding with sparse gradients; the
/// foreach operators take strided tensors only), and a parameter that
/// appears twice in one param group (each occurrence then sees the one
/// before it updated, which lists computed at once would not). Their
/// values are then LibTorch's by construction.
class SGD : public torch::optim::SGD {
 public:
  /// torch::optim::SGD's constructors: param groups (each with its own
  /// SGDOptions or the defaults) or one list of parameters, and the
  /// default options.
  /// \throws c10::Error for the options torch::optim::SGD refuses: a
  ///   negative lr, momentum or weight decay, Nesterov without momentum or
  ///   with dampening.
  using torch::optim::SGD::SGD;

  /// Runs `closure` (if given, with gradients enabled) and updates every
  /// parameter that has a gradient: the values of torch::optim::SGD::step,
  /// made with multi-tensor operators (Note [Same operations as LibTorch's
  /// step]). Parameters without a gradient are skipped, and their momentum
  /// buffers left as they are. Returns the closure's loss (undefined
  /// without a closure).
  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace ddp::optim

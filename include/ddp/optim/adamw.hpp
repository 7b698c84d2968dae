#pragma once

/// \file adamw.hpp
/// AdamW whose step makes one pass over memory per parameter, where
/// LibTorch's torch::optim::AdamW makes seven: the same options, state and
/// serialization as LibTorch's, and its values bit for bit on CPU.
///
/// \code
///   ddp::DistributedDataParallel model(net, group);
///   ddp::optim::AdamW optimizer(model->parameters(),
///                               torch::optim::AdamWOptions(1e-3).weight_decay(0.1));
///   optimizer.zero_grad();
///   torch::nll_loss(model->forward(x), y).backward();
///   optimizer.step();
/// \endcode
///
/// Note [One pass per parameter]
/// LibTorch's AdamW step is seven elementwise operations per parameter
/// (p.mul_ for the decay, exp_avg.mul_ and add_, exp_avg_sq.mul_ and
/// addcmul_, sqrt, the division and add_ of the denominator, p.addcdiv_),
/// each a pass over memory: about 76 bytes moved per fp32 element, and a
/// temporary the size of the parameter. ddp's step reads the parameter,
/// its gradient and both moments once and writes the parameter and the
/// moments once: 28 bytes per element, in place, vectorized (AVX-512 or AVX2
/// and FMA where the processor has them), split across LibTorch's intra-op
/// threads for large parameters and run inline for small ones, so that the
/// many small and empty pieces of FSDP's shards cost a loop each, not a
/// dispatch. It is PyTorch's `AdamW(fused=True)` for LibTorch, but with
/// LibTorch's own arithmetic (Note [Same rounding as LibTorch's Adam] in
/// src/optim/adam_kernel.cpp), so that a model trained with either is the
/// same bit for bit; PyTorch's fused kernel rounds differently from its
/// unfused one. Measured: docs/benchmarks.md (benchmarks/optimizer_bench).
///
/// Note [A subclass of LibTorch's optimizer]
/// As ddp::optim::SGD (Note [A subclass of torch::optim::SGD] in
/// ddp/optim/sgd.hpp), ddp::optim::AdamW derives from torch::optim::AdamW
/// and overrides step() only: its AdamWOptions, param groups, AdamWParamState
/// (step, exp_avg, exp_avg_sq, max_exp_avg_sq) and save()/load() are
/// LibTorch's own, so state saved by either loads into the other, and
/// ddp::snapshot, DCP, ZeroRedundancyOptimizer (`zero_optimizer<ddp::optim::
/// AdamW>`), FSDP and LibTorch's schedulers use it unchanged.
///
/// Note [When LibTorch's step runs instead]
/// The pass covers what a CPU model trains with: strided float or double
/// parameters on the CPU with gradients and moments of the same dtype and
/// layout. When some parameter with a gradient is anything else (on a GPU,
/// half or bfloat16, not dense, a sparse gradient, moments loaded in another
/// dtype, amsgrad switched on for a state without max_exp_avg_sq), the
/// whole step is LibTorch's (torch::optim::AdamW::step), after the closure
/// has run, with LibTorch's values and errors.
///
/// Where the step differs from LibTorch's beyond the values: the version
/// counters of the parameter and of its moments advance once per step (each
/// is written once; LibTorch's operations advance them once per operation).

#include <torch/optim/adamw.h>

namespace ddp::optim {

/// torch::optim::AdamW with a fused step (Note [One pass per parameter]).
class AdamW : public torch::optim::AdamW {
 public:
  /// torch::optim::AdamW's constructors: param groups (each with its own
  /// AdamWOptions or the defaults) or one list of parameters, and the
  /// default options.
  /// \throws c10::Error for the options torch::optim::AdamW refuses: a
  ///   negative lr, eps or weight decay, betas outside [0, 1).
  using torch::optim::AdamW::AdamW;

  /// Runs `closure` (if given, with gradients enabled) and updates every
  /// parameter that has a gradient, with torch::optim::AdamW::step's values
  /// in one pass each (or LibTorch's step: Note [When LibTorch's step runs
  /// instead]). Returns the closure's loss (undefined without a closure).
  torch::Tensor step(LossClosure closure = nullptr) override;
};

}  // namespace ddp::optim

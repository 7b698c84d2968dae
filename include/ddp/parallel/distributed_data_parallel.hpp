#pragma once

/// \file distributed_data_parallel.hpp
/// DistributedDataParallel: data-parallel training of any torch::nn::Module
/// across the ranks of a process group, with gradients all-reduced in
/// buckets while backward is still running.
///
/// \code
///   auto group = ddp::init();
///   ddp::DistributedDataParallel model(Net(), group);
///   torch::optim::SGD optimizer(model->parameters(), 0.1);
///   for (auto& batch : *loader) {
///     optimizer.zero_grad();
///     auto loss = torch::nll_loss(model->forward(batch.data), batch.target);
///     loss.backward();    // gradients arrive averaged over all ranks
///     optimizer.step();
///   }
/// \endcode

#include <c10/core/GradMode.h>
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <memory>
#include <vector>

#include "ddp/comm/process_group_fwd.hpp"
#include "ddp/parallel/comm_hook.hpp"
#include "ddp/parallel/join.hpp"
#include "ddp/parallel/output_tensors.hpp"
#include "ddp/parallel/wrapped_module.hpp"

namespace ddp::parallel {

namespace detail {
class Reducer;
}  // namespace detail

/// Options of DistributedDataParallel, as PyTorch's keyword arguments.
struct DistributedDataParallelOptions {
  /// Largest bucket of gradients reduced in one collective, in MiB.
  TORCH_ARG(double, bucket_cap_mb) = 25;
  /// Cap of the first bucket (the last layers' gradients), in MiB: small, so
  /// that communication starts early in backward.
  TORCH_ARG(double, first_bucket_cap_mb) = 1;
  /// Copy rank 0's buffers (batch-norm statistics, ...) to every rank at the
  /// start of each forward.
  TORCH_ARG(bool, broadcast_buffers) = true;
  /// Allow parameters that get no gradient in an iteration: they count as
  /// ready with a zero gradient (and stay untouched if no rank used them).
  /// Without it, such a parameter is an error naming it.
  TORCH_ARG(bool, find_unused_parameters) = false;
  /// Make each gradient a view into its bucket: no copy in or out of the
  /// buckets, and no second copy of the gradients in memory.
  TORCH_ARG(bool, gradient_as_bucket_view) = false;
  /// Reduce every bucket after backward has finished instead of during it
  /// (Apex's delay_allreduce): no overlap, one burst of communication.
  TORCH_ARG(bool, delay_allreduce) = false;
  /// The graph is the same in every iteration (PyTorch's static_graph): the
  /// first iteration records how many gradients each parameter receives per
  /// backward pass, and later ones reduce each gradient once, when all have
  /// accumulated. Makes reentrant activation checkpointing and a module
  /// applied twice under it work, and skips the unused-parameter search
  /// (parameters the first iteration did not use stay untouched). Ranks
  /// whose first iterations differ fail together, naming the parameters;
  /// an iteration that differs from the first is an error naming them.
  TORCH_ARG(bool, static_graph) = false;
  /// How each bucket is reduced; null means all_reduce_hook().
  TORCH_ARG(std::shared_ptr<CommHook>, comm_hook) = nullptr;
  /// At world size 1 with the default reduction (no comm_hook), issue no
  /// collective, no division and no bucket copy in a step: the average over
  /// one rank is the gradient itself, so the results are bit-identical.
  /// false runs the path every rank takes at world size 2 and more (bucket
  /// copies, the all-reduce, the copies back), as benchmarks compare.
  TORCH_ARG(bool, single_process_shortcut) = true;
};

/// What the last synchronized backward pass did, for tests and tuning.
struct ReducerStats {
  /// Number of buckets and their sizes in bytes, in launch order.
  std::vector<int64_t> bucket_bytes;
  /// Buckets whose reduction started while backward was still running.
  int launched_during_backward = 0;
  /// Whether the buckets have been rebuilt in gradient-ready order.
  bool rebuilt = false;
  /// Iterations that synchronized gradients so far.
  int64_t synchronized_iterations = 0;
  /// Usage exchanges of find_unused_parameters so far (none with
  /// static_graph).
  int64_t unused_parameter_searches = 0;
  /// With static_graph, once recorded: the gradients each trainable
  /// parameter receives per backward pass, in registration order.
  std::vector<int64_t> static_gradient_counts;
};

/// Wraps a module for data-parallel training. Construction checks that the
/// module has the same parameters (names, shapes, dtypes) on every rank and
/// copies rank 0's parameters and buffers to all; forward() passes through;
/// backward() leaves every gradient averaged over the ranks.
/// Under a Join (ddp/parallel/join.hpp), ranks may run different numbers of
/// iterations: each training forward (grad mode on, module in training
/// mode) starts the iteration's round, and a joined rank shadows the buffer
/// broadcast and the gradient all-reduces. Forwards in eval mode or without
/// grad neither start a round nor broadcast buffers while a Join is active.
class DistributedDataParallelImpl : public torch::nn::Module, public Joinable {
 public:
  /// Wraps `module` (a holder such as `Net()` or `torch::nn::Sequential(...)`,
  /// a shared_ptr, or an AnyModule; Note [Wrapping any module]), which must
  /// live on one device. The process group is the last argument of every
  /// ddp constructor (CONTRIBUTING.md).
  /// \throws ConfigError for invalid options or a module on several devices;
  ///   InvalidArgumentError naming the first parameter or buffer that
  ///   differs between ranks, on every rank.
  DistributedDataParallelImpl(WrappedModule module, DistributedDataParallelOptions options,
                              std::shared_ptr<ProcessGroup> group);

  /// Wraps `module` with the default options.
  DistributedDataParallelImpl(WrappedModule module, std::shared_ptr<ProcessGroup> group)
      : DistributedDataParallelImpl(std::move(module), DistributedDataParallelOptions(),
                                    std::move(group)) {}

  ~DistributedDataParallelImpl() override;

  /// Runs the wrapped module's forward (after broadcasting buffers, when
  /// enabled) and returns its output as `Output`: a Tensor by default, or
  /// what the module returns, e.g. `forward<std::tuple<torch::Tensor,
  /// torch::Tensor>>(x)`. Every tensor in the output (Note [Finding the
  /// tensors in an output]) can start the backward that synchronizes.
  /// \throws InvalidArgumentError naming both types when the module returns
  ///   another type than `Output`.
  template <typename Output = torch::Tensor, typename... Args>
  Output forward(Args&&... args) {
    prepare_forward();
    auto output = WrappedModule::take<Output>(module_.any_forward(std::forward<Args>(args)...),
                                              "DistributedDataParallel");
    if (at::GradMode::is_enabled()) {
      std::vector<at::Tensor> tensors;
      collect_output_tensors(output, tensors);
      finish_forward(tensors);
    }
    return output;
  }

  /// Turns gradient synchronization off while alive: backward passes
  /// accumulate gradients locally; the first backward after the guard ends
  /// reduces the accumulated gradients (PyTorch's `no_sync()`).
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(DistributedDataParallelImpl& owner);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    DistributedDataParallelImpl& owner_;
    bool previous_;
  };
  /// See NoSyncGuard.
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  /// The wrapped module.
  std::shared_ptr<torch::nn::Module> module() const { return module_.ptr(); }
  /// The process group gradients are reduced over.
  const std::shared_ptr<ProcessGroup>& process_group() const { return group_; }
  /// The options in force.
  const DistributedDataParallelOptions& options() const { return options_; }
  /// What the last synchronized backward pass did.
  ReducerStats stats() const;

  /// Joinable: the group gradients are reduced over.
  ProcessGroup& join_process_group() override { return *group_; }
  /// Joinable: the buffer broadcast and, when the ranks still training
  /// synchronize, one all-reduce of zeros per bucket (Note [Joining]).
  void join_shadow(const JoinRound& round) override;
  /// Joinable: copies parameters and buffers from `source` to every rank.
  void join_finish(int source) override;

 private:
  void prepare_forward();
  void finish_forward(std::vector<at::Tensor>& outputs);
  void broadcast_buffers(int source);

  WrappedModule module_;
  std::shared_ptr<ProcessGroup> group_;
  DistributedDataParallelOptions options_;
  std::shared_ptr<detail::Reducer> reducer_;
};

/// Module holder for DistributedDataParallelImpl, LibTorch style.
TORCH_MODULE(DistributedDataParallel);

}  // namespace ddp::parallel

namespace ddp {
using namespace parallel;  // Note [One namespace per layer] in ddp/ddp.hpp
}  // namespace ddp

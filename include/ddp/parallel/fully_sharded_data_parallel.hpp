#pragma once

/// \file fully_sharded_data_parallel.hpp
/// FullyShardedDataParallel: parameters, gradients and optimizer state
/// sharded across the ranks (PyTorch's FSDP, ZeRO stage 3). Each unit's
/// parameters are all-gathered just before it runs and freed after; its
/// gradients are reduce-scattered into this rank's shard once complete.
///
/// \code
///   auto group = ddp::init();
///   ddp::FullyShardedDataParallel model(
///       torch::nn::Sequential(torch::nn::Linear(784, 512), torch::nn::ReLU(),
///                             torch::nn::Linear(512, 10)),
///       group);                                        // one unit per Linear
///   torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
///   optimizer.zero_grad();
///   torch::nll_loss(model->forward(x), y).backward();  // gradients land in the shards
///   optimizer.step();                                  // steps this rank's shards only
/// \endcode

#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/nn/pimpl.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "ddp/comm/device_mesh.hpp"
#include "ddp/comm/process_group_fwd.hpp"
#include "ddp/parallel/fully_sharded_units.hpp"
#include "ddp/parallel/output_tensors.hpp"
#include "ddp/parallel/wrapped_module.hpp"

namespace ddp::parallel {

namespace detail {
class BufferPool;
class UnitSchedule;
struct GatheredBytes;
}  // namespace detail

/// The bytes of full (unsharded) parameters and gradients this rank holds,
/// counted at each allocation and release of their storages.
struct FullyShardedMemory {
  /// Held now (between steps: 0).
  int64_t gathered_bytes = 0;
  /// The most held at once since construction or reset_peak_memory().
  int64_t peak_gathered_bytes = 0;
  /// This rank's shards (the sharded parameters; gradients and optimizer
  /// state follow their sizes).
  int64_t shard_bytes = 0;
  /// Host buffers freed by the units and kept for the next step's gathers
  /// and gradients (cache_buffers); empty_cache() frees them.
  int64_t cached_bytes = 0;
  /// The most bytes of those host buffers in use at once since
  /// construction (the gathered parameters and full gradients, and the
  /// reduced shards; a buffer is in use until the backend too lets go of
  /// it): cached plus in use never exceeds it. 0 on a GPU.
  int64_t peak_buffer_bytes = 0;
  /// LibTorch's host blocks from 1 MiB (the parameters' gradients) freed in
  /// a backward and kept for the next, within the largest parameter's
  /// bytes (cache_buffers), those of every FSDP model in the process;
  /// empty_cache() frees them. 0 on a GPU.
  int64_t pooled_bytes = 0;
};

/// Options of FullyShardedDataParallel, in PyTorch's FSDP vocabulary.
struct FullyShardedDataParallelOptions {
  /// Free a unit's full parameters after its forward and gather them again
  /// for its backward (FSDP's reshard_after_forward). false keeps them from
  /// the forward until the unit's backward is done: less communication,
  /// more memory.
  TORCH_ARG(bool, reshard_after_forward) = true;
  /// Units whose all-gather starts ahead of the one that runs, in forward
  /// and in backward: overlap of communication with compute, and the bound
  /// on gathered units alive at once (1 + prefetch). 0 gathers each unit
  /// when it runs.
  TORCH_ARG(int, prefetch) = 1;
  /// Let a unit's gradient reduce-scatter run on during the backward of the
  /// unit before it, as FSDP2 does: faster where communication runs beside
  /// compute (a GPU), and one more unit-sized gradient alive. false: each
  /// reduction finishes before the next unit's gradient is allocated, so a
  /// backward holds the running unit, its gradient and the prefetched unit
  /// (Note [The order of a sharded step]).
  TORCH_ARG(bool, overlap_reduction) = false;
  /// Which submodules are units (Note [Where the units come from]): called
  /// with each submodule's qualified name, outermost first; a picked
  /// module's descendants are not asked. Null: a Sequential's entries, or
  /// the whole module.
  TORCH_ARG(WrapPolicy, wrap_policy) = nullptr;
  /// Allow units that some ranks do not call in a step (a branch taken
  /// sometimes), as DDP's find_unused_parameters: each forward ends with
  /// one small all-reduce of which units ran; a unit no rank ran keeps its
  /// shard's gradient untouched, one that ran elsewhere reduces zeros here.
  /// Without it, every unit is reduced in every backward, zeros where no
  /// gradient came, which momentum and weight decay then act on.
  TORCH_ARG(bool, find_unused_units) = false;
  /// Mixed precision: the dtype the units are gathered and run in (bf16 or
  /// fp16), the floating-point tensor arguments of the module and of each
  /// unit (sharded_call's) cast to it, and each unit's floating-point
  /// buffers (BatchNorm's statistics) run in it, their values kept in the
  /// model's dtype; the shards (the optimizer's masters), the gradients'
  /// reduction and no_sync()'s accumulation stay in the model's dtype
  /// (fp32), as FSDP's MixedPrecisionPolicy with reduce_dtype fp32; the
  /// full parameters exported are the fp32 masters. The output comes in
  /// this dtype.
  TORCH_ARG(std::optional<c10::ScalarType>, param_dtype) = std::nullopt;
  /// Keep the host buffers the units free (gathered parameters, full and
  /// reduced gradients) for the next step's requests of the same size,
  /// as CUDA's caching allocator keeps GPU memory: no fresh pages to fault
  /// in each step. Kept plus in use never exceeds the most in use at once,
  /// so the peak RSS is unchanged; between steps that peak stays resident
  /// (FullyShardedMemory::cached_bytes) until empty_cache(). And through
  /// each backward, LibTorch's host blocks from 1 MiB (the parameters'
  /// gradients) come from mappings kept for the next, within the largest
  /// parameter's bytes (Note [The backward's large blocks from a pool] in
  /// src/parallel/fully_sharded/mapped_allocations.hpp). false frees
  /// each at once (Note [Buffers kept between steps] in
  /// src/parallel/fully_sharded/buffer_pool.hpp).
  TORCH_ARG(bool, cache_buffers) = true;
  /// Hybrid sharding (FSDP2's 2-D mesh, HSDP): shard each unit across the
  /// ranks of this rank's row of the mesh and keep one copy per row; a
  /// unit's gradient is reduce-scattered within the row, then its shard
  /// all-reduced across the rows (Note [Hybrid sharding] in
  /// src/parallel/fully_sharded/sharded_unit.hpp). The mesh's world must be
  /// the wrapper's process group. Null: shard across every rank.
  TORCH_ARG(std::shared_ptr<DeviceMesh>, device_mesh) = nullptr;
  /// hpZ (ZeRO++'s hierarchical partitioning; FSDP2's reshard_after_forward
  /// given a size): after a training forward each unit keeps its full
  /// parameters sharded across this rank's row of the mesh (a node, with
  /// DeviceMesh::by_node), so that the backward's all-gathers stay within
  /// the row; the model itself stays sharded across the whole world. Costs
  /// 1/row of each unit's full parameters from its forward to its backward
  /// (Note [Resharding to the node] in
  /// src/parallel/fully_sharded/sharded_unit.hpp). The mesh's world must be
  /// the wrapper's process group; it needs reshard_after_forward, and
  /// neither device_mesh (whose gathers stay in the row already) nor
  /// find_unused_units (which keeps units gathered). Null: none.
  TORCH_ARG(std::shared_ptr<DeviceMesh>, reshard_after_forward_mesh) = nullptr;
};

/// Wraps a module for fully sharded data-parallel training: construction
/// copies rank 0's parameters and buffers to every rank, checks that all
/// ranks have the same units, and keeps 1/N of each unit's flat parameters
/// on this rank. named_parameters() are this rank's pieces of the model's
/// parameters, under their names in the model (Note [A unit's pieces] in
/// src/parallel/fully_sharded/sharded_unit.hpp): the run of each
/// flattened parameter that this rank's shard holds, empty for most.
/// Give them to any torch::optim optimizer, in as many param groups as
/// the recipe has (no weight decay on biases and norms, by name); after
/// backward their .grad holds their part of the gradient averaged over the
/// ranks, or none for a parameter that no rank gave a gradient (with
/// find_unused_units).
class FullyShardedDataParallelImpl : public torch::nn::Module {
 public:
  /// Wraps `module` (Note [Where the units come from]). The process group
  /// is the last argument, as in every ddp constructor.
  /// \throws ConfigError for a unit that mixes dtypes, devices or frozen
  ///   and trainable parameters, or a parameter shared by two units;
  ///   InvalidArgumentError naming the first unit that differs between
  ///   ranks, on every rank.
  FullyShardedDataParallelImpl(WrappedModule module, FullyShardedDataParallelOptions options,
                               std::shared_ptr<ProcessGroup> group);
  FullyShardedDataParallelImpl(WrappedModule module, std::shared_ptr<ProcessGroup> group)
      : FullyShardedDataParallelImpl(std::move(module), FullyShardedDataParallelOptions(),
                                     std::move(group)) {}
  ~FullyShardedDataParallelImpl() override;

  /// Runs the module unit by unit, each gathered just before it runs, and
  /// returns its output as `Output` (see DistributedDataParallel::forward).
  template <typename Output = torch::Tensor, typename... Args>
  Output forward(Args&&... args) {
    ActiveForward active(*this);
    torch::nn::AnyValue value = [&] {
      try {
        return run_units(cast_input(std::forward<Args>(args))...);
      } catch (const c10::Error& error) {
        explain_forward_failure(error);
      }
    }();
    auto output = WrappedModule::take<Output>(std::move(value), "FullyShardedDataParallel");
    std::vector<at::Tensor> tensors;
    collect_output_tensors(output, tensors);
    end_forward(tensors);
    return output;
  }

  /// Turns gradient reduction off while alive (PyTorch's `no_sync()`):
  /// backward passes accumulate each unit's full, unsharded gradient (the
  /// memory of every unit's gradient, kept until the first backward after
  /// the guard, which reduces the sum into the shards).
  class NoSyncGuard {
   public:
    explicit NoSyncGuard(FullyShardedDataParallelImpl& owner);
    ~NoSyncGuard();
    NoSyncGuard(const NoSyncGuard&) = delete;
    NoSyncGuard& operator=(const NoSyncGuard&) = delete;

   private:
    FullyShardedDataParallelImpl& owner_;
    bool previous_;
  };
  /// See NoSyncGuard.
  [[nodiscard]] NoSyncGuard no_sync() { return NoSyncGuard(*this); }

  /// Scales the shards' gradients so that the norm of the whole gradient
  /// (every rank's shards, one all-reduce) is at most `max_norm`, as
  /// torch::nn::utils::clip_grad_norm_ does on the full gradient; returns
  /// that norm, before clipping.
  double clip_grad_norm(double max_norm);

  /// What this rank holds unsharded, and its shards.
  FullyShardedMemory memory() const;
  /// Starts a new peak in memory().
  void reset_peak_memory();
  /// Frees the buffers kept for the next step (memory().cached_bytes) and
  /// the backward's kept blocks (those of every FSDP model in the
  /// process), as torch.cuda.empty_cache() does, and those a backend lets
  /// go of before the next step; the next step allocates afresh.
  void empty_cache();

  /// The wrapped module. While a unit is sharded (between steps) its
  /// parameters hold placeholders of their shape: an operation on one (a
  /// sum, printing, torch::save of the module) throws a ConfigError that
  /// names it; read them through full_parameters() (Note [Parameters
  /// between steps] in src/parallel/fully_sharded/sharded_placeholder.hpp).
  std::shared_ptr<torch::nn::Module> module() const { return module_.ptr(); }
  /// The units, in forward order: their names.
  std::vector<std::string> unit_names() const;
  /// The units' elements, without padding, in unit order (each rank holds
  /// a shard of each, padded to a multiple of the world size).
  std::vector<int64_t> unit_numels() const;
  /// What each of named_parameters() is a piece of (Note [A unit's
  /// pieces]), in that order.
  struct PieceOf {
    std::string name;            ///< The model's parameter (and the piece's name).
    std::vector<int64_t> shape;  ///< The parameter's shape.
    int64_t begin = 0;           ///< Where the piece starts in the flattened parameter.
  };
  std::vector<PieceOf> pieces_of() const;
  /// The module's parameters in full (copies), by name, gathered one unit
  /// at a time: no rank holds more than one unit's full parameters beyond
  /// its shards and the copies. For evaluation and export.
  torch::OrderedDict<std::string, at::Tensor> full_parameters();
  /// Gathers one unit at a time and calls `visit` with each of its
  /// parameters' names and full values (views into the gathered unit,
  /// valid during the call), then frees the unit: no rank holds more than
  /// one unit's full parameters beyond its shards. A collective: every rank
  /// calls it. For exports that stream (snapshot::save_consolidated()).
  void for_each_full_parameter(
      const std::function<void(const std::string& name, const at::Tensor& value)>& visit);
  const FullyShardedDataParallelOptions& options() const { return options_; }
  const std::shared_ptr<ProcessGroup>& process_group() const { return group_; }
  /// The ranks each unit is sharded across: the process group, or this
  /// rank's row of the device_mesh.
  ProcessGroup& shard_group() const;

 private:
  friend int detail::enter_unit(const torch::nn::Module* module);
  friend void detail::leave_unit(int unit, std::vector<at::Tensor>& outputs);
  friend at::Tensor detail::unit_input(int unit, const at::Tensor& tensor);
  friend class detail::CheckpointedRun;
  int unit_of(const torch::nn::Module* module) const;

  /// Makes this wrapper the one sharded_call() finds on this thread while
  /// alive (and calls begin_forward()).
  class ActiveForward {
   public:
    explicit ActiveForward(FullyShardedDataParallelImpl& owner);
    ~ActiveForward();
    ActiveForward(const ActiveForward&) = delete;
    ActiveForward& operator=(const ActiveForward&) = delete;

   private:
    FullyShardedDataParallelImpl* previous_;
  };

  template <typename... Args>
  torch::nn::AnyValue run_units(Args&&... args) {
    if (const auto& sequential = module_.sequential()) {
      size_t index = 0;
      auto entry = sequential->begin();
      before_entry(index);
      torch::nn::AnyValue value = entry->any_forward(std::forward<Args>(args)...);
      for (++entry; entry != sequential->end(); ++entry) {
        after_entry(index, value);
        before_entry(++index);
        value = entry->any_forward(std::move(value));
      }
      return value;
    }
    before_entry(0);
    return module_.any_forward(std::forward<Args>(args)...);
  }
  /// A floating-point Tensor argument in param_dtype; any other as it is.
  template <typename T>
  decltype(auto) cast_input(T&& value) const {
    if constexpr (std::is_same_v<std::decay_t<T>, at::Tensor>) {
      return cast_tensor(value);
    } else {
      return std::forward<T>(value);
    }
  }
  at::Tensor cast_tensor(const at::Tensor& tensor) const;
  /// Rethrows `error`, a forward's, as a ConfigError when it read the
  /// parameters of a unit not gathered (one called outside sharded_call).
  [[noreturn]] void explain_forward_failure(const c10::Error& error) const;
  void begin_forward();
  void before_entry(size_t entry);
  void after_entry(size_t entry, torch::nn::AnyValue& output);
  void end_forward(std::vector<at::Tensor>& outputs);

  WrappedModule module_;
  FullyShardedDataParallelOptions options_;
  std::shared_ptr<ProcessGroup> group_;
  std::shared_ptr<detail::GatheredBytes> gathered_;
  std::shared_ptr<detail::BufferPool> pool_;
  std::shared_ptr<detail::UnitSchedule> schedule_;
  std::vector<int> entry_units_;  // a Sequential entry's unit, or -1
  std::unordered_map<const torch::nn::Module*, int> unit_of_module_;
};

/// Module holder for FullyShardedDataParallelImpl, LibTorch style.
TORCH_MODULE(FullyShardedDataParallel);

}  // namespace ddp::parallel

namespace ddp {
using namespace parallel;  // Note [One namespace per layer] in ddp/ddp.hpp
}  // namespace ddp

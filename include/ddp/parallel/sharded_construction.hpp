#pragma once

/// \file sharded_construction.hpp
/// Building a model for FullyShardedDataParallel without ever holding it
/// whole: each unit is sharded as soon as it is built.
///
/// \code
///   struct StackImpl : torch::nn::Module {
///     explicit StackImpl(int64_t blocks) {
///       for (int64_t b = 0; b < blocks; ++b) {
///         // Sharded here under a ShardedConstruction; as built without one.
///         layers.push_back(register_module(
///             "layer" + std::to_string(b), ddp::shard_as_built(torch::nn::Linear(64, 64))));
///       }
///     }
///     torch::Tensor forward(torch::Tensor x) {
///       for (auto& layer : layers) x = torch::relu(ddp::sharded_call(layer, x));
///       return x;
///     }
///     std::vector<torch::nn::Linear> layers;
///   };
///   auto group = ddp::init();
///   ddp::ShardedConstruction construction(group);
///   torch::manual_seed(0);  // the same seed on every rank
///   auto stack = std::make_shared<StackImpl>(8);
///   ddp::FullyShardedDataParallel model(stack, group);  // the built units are its units
/// \endcode

#include <torch/nn/module.h>

#include <cstdint>
#include <memory>

#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::parallel {

// Note [Sharded construction]
// FullyShardedDataParallel holds 1/N of the model, but a model built
// plainly is whole on every rank until it is wrapped. LibTorch modules
// allocate and initialize their parameters in their constructors, and C++
// has no meta device to build on (no default device to set), so ddp
// shards as the model is built: the model's constructor passes each
// unit-to-be through ddp::shard_as_built(block) (the one line, as
// sharded_call's in the forward), which, while a ShardedConstruction is
// alive on the thread, copies this rank's shard of the block's flattened
// parameters (the layout FullyShardedDataParallel gives the unit) and
// frees their storage at once, leaving placeholders of their shapes. So a
// rank holds at most one built unit whole, with the shards of those built
// before. Every rank builds every unit, drawing from its own generator, so
// the values are those of the plain build with the same seed, bit for
// bit, and no byte of them crosses the network; a fingerprint of each
// unit's values is compared across ranks when the model is wrapped, so a
// rank seeded differently is a named error rather than a model that
// differs between ranks. FullyShardedDataParallel constructed while the
// ShardedConstruction is alive adopts the shards: the built modules are
// its units (the wrap_policy, when given, must pick exactly them), and
// only the root's parameters and the buffers are broadcast from rank 0.

namespace detail {
struct BuiltShards;
class MappedAllocations;
/// Shards `module`'s parameters if a ShardedConstruction is alive on this
/// thread (Note [Sharded construction]).
void shard_built(const std::shared_ptr<torch::nn::Module>& module);
/// The ShardedConstruction alive on this thread, or null.
BuiltShards* built_shards();
}  // namespace detail

/// While alive, ddp::shard_as_built() shards each unit it is given on this
/// thread, and FullyShardedDataParallel adopts those shards (Note [Sharded
/// construction]). Wrap the model before it ends.
class ShardedConstruction {
 public:
  /// The group the units will be sharded over: its size and this rank
  /// decide each shard. The group the model is wrapped with, or, for a
  /// model wrapped with a device_mesh (hybrid sharding), the mesh's
  /// shard_group(): each row then builds the same shards.
  explicit ShardedConstruction(std::shared_ptr<ProcessGroup> group);
  ~ShardedConstruction();
  ShardedConstruction(const ShardedConstruction&) = delete;
  ShardedConstruction& operator=(const ShardedConstruction&) = delete;

  /// The units built so far, and those still waiting to be wrapped.
  int64_t built_units() const;
  int64_t unwrapped_units() const;

 private:
  std::unique_ptr<detail::BuiltShards> shards_;
  detail::BuiltShards* previous_;
  // c10's CPU allocator maps large blocks while this is alive (Note [A
  // construction's blocks outside the heap]).
  std::unique_ptr<detail::MappedAllocations> mapped_;
};

/// Returns `module` (a module holder) after sharding its parameters when a
/// ShardedConstruction is alive on this thread; as it is otherwise. Give
/// it each module that is to be a unit, as it is built, in the model's
/// constructor.
/// \throws ConfigError for a module that mixes dtypes or devices, or one
///   given twice.
template <typename ModuleHolder>
ModuleHolder shard_as_built(ModuleHolder module) {
  detail::shard_built(module.ptr());
  return module;
}

}  // namespace ddp::parallel

namespace ddp {
using namespace parallel;  // Note [One namespace per layer] in ddp/ddp.hpp
}  // namespace ddp

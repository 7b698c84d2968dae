#pragma once

// Internal: the shards ddp::shard_as_built() took while a
// ShardedConstruction is alive, until FullyShardedDataParallel adopts them
// (Note [Sharded construction] in ddp/parallel/sharded_construction.hpp).

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddp/comm/process_group_fwd.hpp"
#include "ddp/parallel/sharded_construction.hpp"

namespace ddp::parallel::detail {

/// One module built sharded: this rank's shard of its flattened
/// parameters, in the layout ShardedUnit gives a unit (each parameter once,
/// in named_parameters() order, padded to a multiple of the world size).
struct BuiltUnit {
  std::shared_ptr<torch::nn::Module> module;
  std::vector<at::Tensor> parameters;  // now placeholders of their shapes
  std::vector<at::Tensor> placeholders;
  at::Tensor shard;
  int64_t numel = 0;
  /// Of the full values, equal on every rank that drew the same ones.
  std::string fingerprint;
};

struct BuiltShards {
  std::shared_ptr<ProcessGroup> group;
  std::vector<BuiltUnit> units;  // in build order; adopted ones have no module
  int64_t built = 0;

  /// The unit built from `module`, not yet adopted, or null. (The
  /// placeholders of a unit never adopted say, when read, that it was not
  /// wrapped; once the construction ended, that its values are gone.)
  BuiltUnit* find(const torch::nn::Module* module);
  /// How many built units wait to be adopted.
  int64_t waiting() const;
};

struct UnitPlan;

/// For each unit of `plan`, the built unit it adopts, or null; the
/// adopted ones are taken out of `shards` (their shard is the caller's to
/// move). `group` is the wrapper's.
/// \throws ConfigError when `group` differs from the construction's in
///   size or rank, or a parameter of a built module is not one of a unit
///   that is that module (the wrap_policy picked other modules).
std::vector<BuiltUnit*> adopt_built(BuiltShards& shards, const UnitPlan& plan,
                                    const ProcessGroup& group);

/// \throws ConfigError naming the first parameter of `plan` that a
///   construction which ended unwrapped left without its values.
void refuse_ended_construction(const UnitPlan& plan);

}  // namespace ddp::parallel::detail

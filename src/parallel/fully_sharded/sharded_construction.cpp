#include "ddp/parallel/sharded_construction.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <iomanip>
#include <sstream>
#include <string>
#include <string_view>
#include <unordered_set>
#include <utility>

#include "base/dtype_name.hpp"
#include "base/mapped_tensor.hpp"
#include "base/str.hpp"
#include "ddp/base/allocator.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"
#include "parallel/fully_sharded/built_shards.hpp"
#include "parallel/fully_sharded/mapped_allocations.hpp"
#include "parallel/fully_sharded/sharded_placeholder.hpp"
#include "parallel/fully_sharded/unit_plan.hpp"

namespace ddp::parallel {
namespace {

constexpr const char* kShardAsBuilt = "ddp::shard_as_built";

thread_local detail::BuiltShards* active_construction = nullptr;

// A hash of `tensor`'s bytes, combined into `seed`.
size_t combine_bytes(size_t seed, const at::Tensor& tensor) {
  const at::Tensor cpu = tensor.detach().to(at::kCPU).contiguous();
  const std::string_view bytes(static_cast<const char*>(cpu.data_ptr()), cpu.nbytes());
  return seed ^
         (std::hash<std::string_view>()(bytes) + 0x9e3779b97f4a7c15ULL + (seed << 6) + (seed >> 2));
}

// A tensor of `parameter`'s shape, dtype and device that holds no bytes.
at::Tensor without_bytes(const at::Tensor& parameter) {
  at::Tensor empty = at::empty({0}, parameter.options().requires_grad(false));
  empty.unsafeGetTensorImpl()->set_sizes_contiguous(parameter.sizes());
  return empty;
}

}  // namespace

namespace detail {

BuiltShards* built_shards() { return active_construction; }

BuiltUnit* BuiltShards::find(const torch::nn::Module* module) {
  for (auto& unit : units) {
    if (unit.module.get() == module) return &unit;
  }
  return nullptr;
}

int64_t BuiltShards::waiting() const {
  return std::count_if(units.begin(), units.end(),
                       [](const BuiltUnit& u) { return u.module != nullptr; });
}

void shard_built(const std::shared_ptr<torch::nn::Module>& module) {
  BuiltShards* shards = active_construction;
  if (!shards || !module) return;
  if (shards->find(module.get())) {
    throw ConfigError(base::detail::str(
        kShardAsBuilt, ": module ", module->name(),
        " was given twice; give each module that is to be a unit once, where it is built."));
  }
  BuiltUnit unit;
  std::unordered_set<const void*> seen;
  std::vector<std::string> names;
  for (const auto& item : module->named_parameters()) {
    if (!seen.insert(item.value().unsafeGetTensorImpl()).second) continue;  // tied within
    unit.parameters.push_back(item.value());
    names.push_back(item.key());
  }
  if (unit.parameters.empty()) return;  // no unit: nothing to shard
  const at::Tensor& first = unit.parameters.front();
  for (size_t i = 0; i < unit.parameters.size(); ++i) {
    const at::Tensor& p = unit.parameters[i];
    if (p.scalar_type() != first.scalar_type() || p.device() != first.device()) {
      throw ConfigError(base::detail::str(
          kShardAsBuilt, ": module ", module->name(), " mixes ",
          base::detail::dtype_name(first.scalar_type()), " on ", first.device().str(), " ('",
          names.front(), "') with ", base::detail::dtype_name(p.scalar_type()), " on ",
          p.device().str(), " ('", names[i],
          "'); a unit's parameters are one flat buffer: give them one dtype and device."));
    }
    unit.numel += p.numel();
  }
  // The layout of ShardedUnit: flattened in order, padded to a multiple of
  // the world size, this rank's contiguous part.
  const int64_t world = shards->group->size();
  const int64_t shard_numel = (unit.numel + world - 1) / world;
  const int64_t shard_begin = shards->group->rank() * shard_numel;
  torch::NoGradGuard no_grad;
  // Note [Long-lived buffers outside the heap]
  unit.shard =
      base::detail::mapped_empty(shard_numel, first.options().requires_grad(false)).zero_();
  size_t hash = 0;
  int64_t offset = 0;
  for (size_t i = 0; i < unit.parameters.size(); ++i) {
    const at::Tensor flat = unit.parameters[i].detach().reshape({-1});
    const int64_t begin = std::max(shard_begin, offset);
    const int64_t end = std::min(shard_begin + shard_numel, offset + flat.numel());
    if (begin < end) {
      unit.shard.narrow(0, begin - shard_begin, end - begin)
          .copy_(flat.narrow(0, begin - offset, end - begin));
    }
    hash = combine_bytes(hash, flat);
    offset += flat.numel();
    // Its bytes go now (the module's reference was the last one, as
    // LibTorch's modules keep no other).
    if (placeholders_available()) {
      unit.placeholders.push_back(make_placeholder(
          unit.parameters[i], base::detail::str("'", names[i], "' of a ", module->name()),
          PlaceholderOf::kBuiltModule));
      hold(unit.parameters[i], unit.placeholders.back());
    } else {
      hold(unit.parameters[i], without_bytes(unit.parameters[i]));
    }
  }
  std::ostringstream fingerprint;
  fingerprint << std::hex << std::setw(16) << std::setfill('0') << hash;
  unit.fingerprint = fingerprint.str();
  unit.module = module;
  shards->units.push_back(std::move(unit));
  ++shards->built;
  base::release_free_memory();  // Note [Freed memory given back]
}

std::vector<BuiltUnit*> adopt_built(BuiltShards& shards, const UnitPlan& plan,
                                    const ProcessGroup& group) {
  if (group.size() != shards.group->size() || group.rank() != shards.group->rank()) {
    throw ConfigError(base::detail::str(
        "FullyShardedDataParallel: the group is rank ", group.rank(), " of ", group.size(),
        ", but the ddp::ShardedConstruction alive sharded the built units for rank ",
        shards.group->rank(), " of ", shards.group->size(),
        "; wrap the model with the group the construction was given."));
  }
  std::vector<BuiltUnit*> adopted(plan.names.size(), nullptr);
  std::unordered_set<const void*> taken;
  for (size_t u = 0; u < plan.names.size(); ++u) {
    BuiltUnit* unit = plan.modules[u] ? shards.find(plan.modules[u]) : nullptr;
    if (!unit) continue;
    const bool same =
        unit->parameters.size() == plan.parameters[u].size() &&
        std::equal(unit->parameters.begin(), unit->parameters.end(), plan.parameters[u].begin(),
                   [](const at::Tensor& a, const at::Tensor& b) { return a.is_same(b); });
    if (!same) {
      throw ConfigError(base::detail::str(
          "FullyShardedDataParallel: unit '", plan.names[u], "' has ", plan.parameters[u].size(),
          " parameters, but ddp::shard_as_built sharded ", unit->parameters.size(),
          " for its module; do not add parameters to a module after giving it to "
          "ddp::shard_as_built."));
    }
    for (const auto& p : unit->parameters) taken.insert(p.unsafeGetTensorImpl());
    adopted[u] = unit;
  }
  // A built module's parameter anywhere else: the policy picked another module.
  std::unordered_set<const void*> stray;
  for (const auto& unit : shards.units) {
    if (!unit.module) continue;
    for (const auto& p : unit.parameters) {
      if (!taken.count(p.unsafeGetTensorImpl())) stray.insert(p.unsafeGetTensorImpl());
    }
  }
  for (size_t u = 0; u < plan.names.size(); ++u) {
    for (size_t i = 0; i < plan.parameters[u].size(); ++i) {
      if (!stray.count(plan.parameters[u][i].unsafeGetTensorImpl())) continue;
      throw ConfigError(base::detail::str(
          "FullyShardedDataParallel: parameter '", plan.parameter_names[u][i], "' of unit '",
          plan.names[u],
          "' belongs to a module ddp::shard_as_built sharded, which the wrap_policy did not pick "
          "as a unit; under a ddp::ShardedConstruction the units are the modules given to "
          "ddp::shard_as_built: leave wrap_policy unset, or have it pick exactly those."));
    }
  }
  for (auto* unit : adopted) {
    if (!unit) continue;
    unit->placeholders.clear();
    unit->module = nullptr;  // adopted: find() no longer returns it
  }
  return adopted;
}

void refuse_ended_construction(const UnitPlan& plan) {
  for (size_t u = 0; u < plan.names.size(); ++u) {
    for (size_t i = 0; i < plan.parameters[u].size(); ++i) {
      if (placeholder_of(plan.parameters[u][i]) != PlaceholderOf::kEndedConstruction) continue;
      throw ConfigError(base::detail::str(
          "FullyShardedDataParallel: parameter '", plan.parameter_names[u][i],
          "' belongs to a module ddp::shard_as_built sharded under a ddp::ShardedConstruction "
          "that ended before this wrapper was made; each rank's shard went with the "
          "construction, so its values are gone. Build the model again and wrap it while the "
          "ddp::ShardedConstruction is alive (the wrapper then adopts the shards)."));
    }
  }
}

}  // namespace detail

ShardedConstruction::ShardedConstruction(std::shared_ptr<ProcessGroup> group)
    : shards_(std::make_unique<detail::BuiltShards>()), previous_(active_construction) {
  if (!group) {
    throw ConfigError(
        "ddp::ShardedConstruction: the process group is null; pass the group returned by "
        "ddp::init(), the one the model will be wrapped with.");
  }
  shards_->group = std::move(group);
  mapped_ = std::make_unique<detail::MappedAllocations>();
  active_construction = shards_.get();
}

ShardedConstruction::~ShardedConstruction() {
  active_construction = previous_;
  // The shards of units never wrapped go now; their placeholders say so.
  for (const auto& unit : shards_->units) {
    if (!unit.module) continue;
    for (const auto& placeholder : unit.placeholders) {
      detail::mark_placeholder(placeholder, detail::PlaceholderOf::kEndedConstruction);
    }
  }
}

int64_t ShardedConstruction::built_units() const { return shards_->built; }

int64_t ShardedConstruction::unwrapped_units() const { return shards_->waiting(); }

}  // namespace ddp::parallel

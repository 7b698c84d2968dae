#include "ddp/parallel/fully_sharded_data_parallel.hpp"

#include <torch/torch.h>

#include <unordered_map>

#include "comm/str.hpp"
#include "ddp/comm/broadcast_tensors.hpp"
#include "ddp/comm/errors.hpp"
#include "ddp/comm/process_group.hpp"
#include "parallel/fully_sharded/unit_schedule.hpp"
#include "parallel/rank_agreement.hpp"

namespace ddp::parallel {
namespace {

constexpr const char* kWho = "FullyShardedDataParallel";

// One unit per Sequential entry with parameters, else the whole module
// (Note [Where the units come from]). `entry_units`: the unit of each
// Sequential entry, -1 for an entry without parameters.
struct UnitPlan {
  std::vector<std::string> names;  // the units'
  std::vector<std::vector<std::string>> parameter_names;
  std::vector<std::vector<at::Tensor>> parameters;
  std::vector<int> entry_units;
};

void add_unit(UnitPlan& plan, const std::string& name, const std::string& prefix,
              torch::nn::Module& module) {
  std::vector<std::string> names;
  std::vector<at::Tensor> parameters;
  for (const auto& item : module.named_parameters()) {
    names.push_back(prefix + item.key());
    parameters.push_back(item.value());
  }
  plan.names.push_back(name);
  plan.parameter_names.push_back(std::move(names));
  plan.parameters.push_back(std::move(parameters));
}

UnitPlan plan_units(const WrappedModule& module) {
  UnitPlan plan;
  if (const auto& sequential = module.sequential()) {
    const auto children = sequential->named_children();
    for (const auto& child : children) {
      if (child.value()->parameters().empty()) {
        plan.entry_units.push_back(-1);
        continue;
      }
      plan.entry_units.push_back(static_cast<int>(plan.names.size()));
      add_unit(plan, child.key(), child.key() + ".", *child.value());
    }
  } else {
    plan.entry_units.push_back(0);
    add_unit(plan, "module", "", *module.ptr());
  }
  // A parameter in two units would be two shards stepped apart.
  std::unordered_map<const void*, std::string> owner;
  for (size_t u = 0; u < plan.names.size(); ++u) {
    for (size_t i = 0; i < plan.parameters[u].size(); ++i) {
      const void* key = plan.parameters[u][i].unsafeGetTensorImpl();
      auto [it, first] = owner.emplace(key, plan.parameter_names[u][i]);
      if (!first) {
        throw ConfigError(comm::detail::str(
            kWho, ": parameter '", plan.parameter_names[u][i], "' of unit '", plan.names[u],
            "' is also '", it->second,
            "' of another unit; shared parameters across units are not supported yet: put the "
            "layers that share it in one unit (one Sequential entry)."));
      }
    }
  }
  return plan;
}

}  // namespace

FullyShardedDataParallelImpl::FullyShardedDataParallelImpl(WrappedModule module,
                                                           FullyShardedDataParallelOptions options,
                                                           std::shared_ptr<ProcessGroup> group)
    : module_(std::move(module)), options_(options), group_(std::move(group)) {
  if (!group_) {
    throw ConfigError(comm::detail::str(
        kWho, ": the process group is null; pass the group returned by ddp::init()."));
  }
  if (!module_.ptr()) throw ConfigError(comm::detail::str(kWho, ": the module is empty."));
  if (options_.prefetch() < 0) {
    throw ConfigError(comm::detail::str(kWho, ": prefetch is ", options_.prefetch(),
                                        "; it must be 0 (no prefetch) or more units."));
  }
  UnitPlan plan = plan_units(module_);
  std::vector<std::string> descriptions{comm::detail::str("options: reshard_after_forward ",
                                                          options_.reshard_after_forward(),
                                                          ", prefetch ", options_.prefetch())};
  for (size_t u = 0; u < plan.names.size(); ++u) {
    descriptions.push_back(plan.names[u] + ": " +
                           comm::detail::str(plan.parameters[u].size(), " parameters"));
    for (const auto& d : detail::describe_tensors(plan.parameter_names[u], plan.parameters[u])) {
      descriptions.push_back("  " + d);
    }
  }
  detail::verify_same_across_ranks(*group_, descriptions, kWho, "units",
                                   "Every rank must build the same model with the same "
                                   "FullyShardedDataParallelOptions before wrapping it.");
  {
    torch::NoGradGuard no_grad;
    std::vector<at::Tensor> state = module_.ptr()->parameters();
    for (const auto& b : module_.ptr()->buffers()) state.push_back(b);
    broadcast_tensors(*group_, state, 0);
  }
  std::vector<std::unique_ptr<detail::ShardedUnit>> units;
  for (size_t u = 0; u < plan.names.size(); ++u) {
    units.push_back(std::make_unique<detail::ShardedUnit>(
        plan.names[u], std::move(plan.parameter_names[u]), std::move(plan.parameters[u]), *group_));
    // parameters() are the shards, which the optimizer steps.
    register_parameter("shard_" + std::to_string(u), units.back()->shard(),
                       units.back()->trainable());
  }
  schedule_ = std::make_shared<detail::UnitSchedule>(std::move(units), std::move(plan.entry_units),
                                                     options_);
  schedule_->attach_hooks();
}

FullyShardedDataParallelImpl::~FullyShardedDataParallelImpl() = default;

void FullyShardedDataParallelImpl::begin_forward() {
  // train()/eval() on this wrapper reach the module, which is not a child
  // (its parameters are not this module's: the shards are).
  if (module_.ptr()->is_training() != is_training()) module_.ptr()->train(is_training());
}

void FullyShardedDataParallelImpl::before_entry(size_t entry) { schedule_->before_entry(entry); }

void FullyShardedDataParallelImpl::after_entry(size_t entry, torch::nn::AnyValue& output) {
  std::vector<at::Tensor> tensors;
  if (auto* tensor = output.try_get<at::Tensor>()) tensors.push_back(*tensor);
  schedule_->after_entry(entry, tensors);
}

void FullyShardedDataParallelImpl::end_forward(std::vector<at::Tensor>& outputs) {
  schedule_->end_forward(outputs);
}

std::vector<std::string> FullyShardedDataParallelImpl::unit_names() const {
  std::vector<std::string> names;
  for (const auto& unit : schedule_->units()) names.push_back(unit->name());
  return names;
}

torch::OrderedDict<std::string, at::Tensor> FullyShardedDataParallelImpl::full_parameters() {
  torch::OrderedDict<std::string, at::Tensor> result;
  torch::NoGradGuard no_grad;
  for (const auto& unit : schedule_->units()) {
    const bool was_gathered = unit->gathered();
    unit->wait_gathered();
    for (size_t i = 0; i < unit->parameters().size(); ++i) {
      result.insert(unit->parameter_names()[i], unit->parameters()[i].detach().clone());
    }
    if (!was_gathered) unit->reshard();
  }
  return result;
}

}  // namespace ddp::parallel

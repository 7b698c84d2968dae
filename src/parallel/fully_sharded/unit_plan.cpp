#include "parallel/fully_sharded/unit_plan.hpp"

#include <torch/nn/modules/container/sequential.h>

#include <algorithm>
#include <memory>
#include <unordered_map>
#include <utility>

#include "base/str.hpp"
#include "ddp/base/errors.hpp"

namespace ddp::parallel::detail {
namespace {

constexpr const char* kWho = "FullyShardedDataParallel";

// A picked module and every name it has in the model (one module may be
// registered under two names: a siamese encoder).
struct PickedUnit {
  std::string name;
  std::shared_ptr<torch::nn::Module> module;
  std::vector<std::string> other_names;
};

bool is_under(const std::string& name, const std::string& prefix) {
  return name.rfind(prefix + ".", 0) == 0;
}

// Whether `name` is inside `unit`, under any of the names its module has.
bool is_in(const std::string& name, const PickedUnit& unit) {
  return is_under(name, unit.name) ||
         std::any_of(unit.other_names.begin(), unit.other_names.end(),
                     [&](const std::string& other) { return is_under(name, other); });
}

// Note [One module, one unit]
// LibTorch's named_modules() lists a module once for every name it is
// registered under (a siamese encoder as "left" and "right"); PyTorch's
// removes the duplicates. A module is therefore asked once, under each of its
// names in turn, and becomes one unit if the policy picks it under any of
// them: a policy by name picks it whichever name it knows. The unit is named
// by the module's first name (PyTorch's, where named_parameters() would list
// its parameters) and knows the others, so that its parameters under every
// name are its own and the forward may call it as often as it likes.

// The modules a Sequential's entries are, or the policy picks; a picked
// module's descendants are not asked.
std::vector<PickedUnit> pick_units(const WrappedModule& module, const WrapPolicy& policy) {
  std::vector<PickedUnit> picked;
  auto add = [&](const std::string& name, const std::shared_ptr<torch::nn::Module>& m) {
    for (auto& p : picked) {
      if (p.module.get() == m.get()) {
        p.other_names.push_back(name);
        return;
      }
    }
    picked.push_back({name, m, {}});
  };
  if (!policy) {
    if (module.sequential()) {
      for (const auto& child : module.sequential()->named_children()) {
        if (!child.value()->parameters().empty()) add(child.key(), child.value());
      }
    }
    return picked;
  }
  // Each module with its names, in the order named_modules() first meets it.
  std::vector<std::pair<std::shared_ptr<torch::nn::Module>, std::vector<std::string>>> modules;
  std::unordered_map<const torch::nn::Module*, size_t> index_of;
  for (const auto& item : module.ptr()->named_modules("", /*include_self=*/false)) {
    const auto [it, first] = index_of.emplace(item.value().get(), modules.size());
    if (first) modules.push_back({item.value(), {}});
    modules[it->second].second.push_back(item.key());
  }
  for (const auto& [m, names] : modules) {
    const bool inside_picked = std::any_of(
        picked.begin(), picked.end(), [&](const PickedUnit& p) { return is_in(names.front(), p); });
    if (inside_picked || m->parameters().empty()) continue;
    const bool chosen = std::any_of(names.begin(), names.end(),
                                    [&](const std::string& name) { return policy(name, *m); });
    if (chosen) picked.push_back({names.front(), m, {names.begin() + 1, names.end()}});
  }
  return picked;
}

}  // namespace

UnitPlan plan_units(const WrappedModule& module, const WrapPolicy& policy) {
  UnitPlan plan;
  const std::vector<PickedUnit> picked = pick_units(module, policy);
  // Where each parameter went: its unit and place there.
  std::unordered_map<const void*, std::pair<size_t, size_t>> place;
  for (const auto& unit : picked) {
    plan.names.push_back(unit.name);
    plan.modules.push_back(unit.module.get());
    plan.parameter_names.emplace_back();
    plan.parameters.emplace_back();
    plan.aliases.emplace_back();
    const size_t u = plan.names.size() - 1;
    for (const auto& item : unit.module->named_parameters()) {
      const std::string name = unit.name + "." + item.key();
      const auto [it, first] =
          place.emplace(item.value().unsafeGetTensorImpl(), std::make_pair(u, 0));
      if (first) {
        it->second.second = plan.parameters[u].size();
        plan.parameter_names[u].push_back(name);
        plan.parameters[u].push_back(item.value());
        plan.aliases[u].emplace_back();
        continue;
      }
      if (it->second.first == u) {  // tied within the unit
        plan.aliases[u][it->second.second].push_back(name);
        continue;
      }
      throw ConfigError(base::detail::str(
          kWho, ": parameter '", name, "' of unit '", unit.name, "' is also parameter '",
          plan.parameter_names[it->second.first][it->second.second], "' of unit '",
          plan.names[it->second.first],
          "'; a parameter shared by two units would be two shards stepped apart: pick a "
          "wrap_policy that puts the modules sharing it in one unit, or leave both to the "
          "root."));
    }
  }
  // The root: every parameter outside the units, and the other names of
  // the units' parameters (those under another name of a unit's module).
  const size_t root = plan.names.size();
  std::vector<std::string> root_names;
  std::vector<at::Tensor> root_parameters;
  std::vector<std::vector<std::string>> root_aliases;
  for (const auto& item : module.ptr()->named_parameters()) {
    const std::string& name = item.key();
    const auto found = place.find(item.value().unsafeGetTensorImpl());
    if (found == place.end()) {
      place.emplace(item.value().unsafeGetTensorImpl(),
                    std::make_pair(root, root_parameters.size()));
      root_names.push_back(name);
      root_parameters.push_back(item.value());
      root_aliases.emplace_back();
      continue;
    }
    const auto [u, i] = found->second;
    if (u == root) {
      root_aliases[i].push_back(name);
      continue;
    }
    const PickedUnit& unit = picked[u];
    const bool in_unit = is_in(name, unit);
    if (!in_unit) {
      throw ConfigError(base::detail::str(
          kWho, ": parameter '", name, "', outside every unit, is also parameter '",
          plan.parameter_names[u][i], "' of unit '", unit.name,
          "' (a tie between a unit and the root: the root's forward would read it while the "
          "unit is sharded); pick a wrap_policy that puts the modules sharing it in one unit, "
          "or leave the shared module out of the units so that both are the root's."));
    }
    if (name != plan.parameter_names[u][i] &&
        std::find(plan.aliases[u][i].begin(), plan.aliases[u][i].end(), name) ==
            plan.aliases[u][i].end()) {
      plan.aliases[u][i].push_back(name);
    }
  }
  if (!root_parameters.empty()) {
    plan.root = 0;
    plan.names.insert(plan.names.begin(), plan.names.empty() ? "module" : "(root)");
    plan.modules.insert(plan.modules.begin(), nullptr);
    plan.parameter_names.insert(plan.parameter_names.begin(), std::move(root_names));
    plan.parameters.insert(plan.parameters.begin(), std::move(root_parameters));
    plan.aliases.insert(plan.aliases.begin(), std::move(root_aliases));
  }
  return plan;
}

}  // namespace ddp::parallel::detail

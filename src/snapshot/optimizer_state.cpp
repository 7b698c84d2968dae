#include "snapshot/optimizer_state.hpp"

#include <c10/util/Type.h>
#include <c10/util/string_utils.h>
#include <torch/optim/adagrad.h>
#include <torch/optim/adam.h>
#include <torch/optim/adamw.h>
#include <torch/optim/rmsprop.h>
#include <torch/optim/sgd.h>

#include <functional>
#include <optional>
#include <set>
#include <typeinfo>
#include <vector>

#include "base/compat/torch_compat.hpp"
#include "base/str.hpp"
#include "ddp/snapshot/errors.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"
#include "snapshot/snapshot_format.hpp"

namespace ddp::snapshot::detail {
namespace {

using nlohmann::json;
namespace optim = torch::optim;

enum class Kind { kSgd, kAdam, kAdamW, kRmsprop, kAdagrad };

// What each supported optimizer keeps per parameter.
struct KindInfo {
  const char* name;
  std::vector<std::string> required;  // tensors every state has
  std::vector<std::string> optional;  // tensors that may be undefined
  bool has_step;
};

const KindInfo& info_of(Kind kind) {
  static const KindInfo kSgd{"sgd", {"momentum_buffer"}, {}, false};
  static const KindInfo kAdam{"adam", {"exp_avg", "exp_avg_sq"}, {"max_exp_avg_sq"}, true};
  static const KindInfo kAdamW{"adamw", {"exp_avg", "exp_avg_sq"}, {"max_exp_avg_sq"}, true};
  static const KindInfo kRmsprop{"rmsprop", {"square_avg"}, {"momentum_buffer", "grad_avg"}, true};
  static const KindInfo kAdagrad{"adagrad", {"sum"}, {}, true};
  switch (kind) {
    case Kind::kSgd:
      return kSgd;
    case Kind::kAdam:
      return kAdam;
    case Kind::kAdamW:
      return kAdamW;
    case Kind::kRmsprop:
      return kRmsprop;
    case Kind::kAdagrad:
      return kAdagrad;
  }
  return kSgd;
}

Kind kind_of(const optim::Optimizer& optimizer) {
  if (dynamic_cast<const optim::SGD*>(&optimizer)) return Kind::kSgd;
  if (dynamic_cast<const optim::Adam*>(&optimizer)) return Kind::kAdam;
  if (dynamic_cast<const optim::AdamW*>(&optimizer)) return Kind::kAdamW;
  if (dynamic_cast<const optim::RMSprop*>(&optimizer)) return Kind::kRmsprop;
  if (dynamic_cast<const optim::Adagrad*>(&optimizer)) return Kind::kAdagrad;
  throw SnapshotError("snapshots do not support the optimizer " +
                      c10::demangle(typeid(optimizer).name()) +
                      " (supported: SGD, Adam, AdamW, RMSprop, Adagrad)");
}

template <typename O, typename Base>
O& as(Base& options) {
  auto* typed = dynamic_cast<O*>(&options);
  if (!typed)
    throw SnapshotError("optimizer options are a " + c10::demangle(typeid(options).name()));
  return *typed;
}

template <typename O>
json adam_options(const O& o) {
  return {{"lr", o.lr()},
          {"betas", {std::get<0>(o.betas()), std::get<1>(o.betas())}},
          {"eps", o.eps()},
          {"weight_decay", o.weight_decay()},
          {"amsgrad", o.amsgrad()}};
}

template <typename O>
void set_adam_options(const json& j, O& o) {
  o.lr(j.at("lr").get<double>());
  o.betas(std::make_tuple(j.at("betas").at(0).get<double>(), j.at("betas").at(1).get<double>()));
  o.eps(j.at("eps").get<double>());
  o.weight_decay(j.at("weight_decay").get<double>());
  o.amsgrad(j.at("amsgrad").get<bool>());
}

json options_to_json(Kind kind, const optim::OptimizerOptions& options) {
  switch (kind) {
    case Kind::kSgd: {
      auto& o = as<const optim::SGDOptions>(options);
      return {{"lr", o.lr()},
              {"momentum", o.momentum()},
              {"dampening", o.dampening()},
              {"weight_decay", o.weight_decay()},
              {"nesterov", o.nesterov()}};
    }
    case Kind::kAdam:
      return adam_options(as<const optim::AdamOptions>(options));
    case Kind::kAdamW:
      return adam_options(as<const optim::AdamWOptions>(options));
    case Kind::kRmsprop: {
      auto& o = as<const optim::RMSpropOptions>(options);
      return {{"lr", o.lr()},
              {"alpha", o.alpha()},
              {"eps", o.eps()},
              {"weight_decay", o.weight_decay()},
              {"momentum", o.momentum()},
              {"centered", o.centered()}};
    }
    case Kind::kAdagrad: {
      auto& o = as<const optim::AdagradOptions>(options);
      return {{"lr", o.lr()},
              {"lr_decay", o.lr_decay()},
              {"weight_decay", o.weight_decay()},
              {"initial_accumulator_value", o.initial_accumulator_value()},
              {"eps", o.eps()}};
    }
  }
  return {};
}

void options_from_json(Kind kind, const json& j, optim::OptimizerOptions& options) {
  switch (kind) {
    case Kind::kSgd: {
      auto& o = as<optim::SGDOptions>(options);
      o.lr(j.at("lr").get<double>());
      o.momentum(j.at("momentum").get<double>());
      o.dampening(j.at("dampening").get<double>());
      o.weight_decay(j.at("weight_decay").get<double>());
      o.nesterov(j.at("nesterov").get<bool>());
      return;
    }
    case Kind::kAdam:
      return set_adam_options(j, as<optim::AdamOptions>(options));
    case Kind::kAdamW:
      return set_adam_options(j, as<optim::AdamWOptions>(options));
    case Kind::kRmsprop: {
      auto& o = as<optim::RMSpropOptions>(options);
      o.lr(j.at("lr").get<double>());
      o.alpha(j.at("alpha").get<double>());
      o.eps(j.at("eps").get<double>());
      o.weight_decay(j.at("weight_decay").get<double>());
      o.momentum(j.at("momentum").get<double>());
      o.centered(j.at("centered").get<bool>());
      return;
    }
    case Kind::kAdagrad: {
      auto& o = as<optim::AdagradOptions>(options);
      o.lr(j.at("lr").get<double>());
      o.lr_decay(j.at("lr_decay").get<double>());
      o.weight_decay(j.at("weight_decay").get<double>());
      o.initial_accumulator_value(j.at("initial_accumulator_value").get<double>());
      o.eps(j.at("eps").get<double>());
      return;
    }
  }
}

// One parameter's state: its step (where counted) and its tensors by field.
struct StateFields {
  std::optional<int64_t> step;
  std::map<std::string, at::Tensor> tensors;
};

template <typename S>
StateFields adam_fields(const S& s) {
  return {s.step(),
          {{"exp_avg", s.exp_avg()},
           {"exp_avg_sq", s.exp_avg_sq()},
           {"max_exp_avg_sq", s.max_exp_avg_sq()}}};
}

StateFields fields_of(Kind kind, const optim::OptimizerParamState& state) {
  switch (kind) {
    case Kind::kSgd:
      return {std::nullopt,
              {{"momentum_buffer", as<const optim::SGDParamState>(state).momentum_buffer()}}};
    case Kind::kAdam:
      return adam_fields(as<const optim::AdamParamState>(state));
    case Kind::kAdamW:
      return adam_fields(as<const optim::AdamWParamState>(state));
    case Kind::kRmsprop: {
      auto& s = as<const optim::RMSpropParamState>(state);
      return {s.step(),
              {{"square_avg", s.square_avg()},
               {"momentum_buffer", s.momentum_buffer()},
               {"grad_avg", s.grad_avg()}}};
    }
    case Kind::kAdagrad: {
      auto& s = as<const optim::AdagradParamState>(state);
      return {s.step(), {{"sum", s.sum()}}};
    }
  }
  return {};
}

using FieldGetter = std::function<at::Tensor(const std::string&)>;  // undefined if absent

template <typename S>
std::unique_ptr<optim::OptimizerParamState> make_adam_state(int64_t step, const FieldGetter& get) {
  auto s = std::make_unique<S>();
  s->step(step);
  s->exp_avg(get("exp_avg"));
  s->exp_avg_sq(get("exp_avg_sq"));
  s->max_exp_avg_sq(get("max_exp_avg_sq"));
  return s;
}

std::unique_ptr<optim::OptimizerParamState> make_state(Kind kind, const json& entry,
                                                       const FieldGetter& get) {
  int64_t step = info_of(kind).has_step ? entry.at("step").get<int64_t>() : 0;
  switch (kind) {
    case Kind::kSgd: {
      auto s = std::make_unique<optim::SGDParamState>();
      s->momentum_buffer(get("momentum_buffer"));
      return s;
    }
    case Kind::kAdam:
      return make_adam_state<optim::AdamParamState>(step, get);
    case Kind::kAdamW:
      return make_adam_state<optim::AdamWParamState>(step, get);
    case Kind::kRmsprop: {
      auto s = std::make_unique<optim::RMSpropParamState>();
      s->step(step);
      s->square_avg(get("square_avg"));
      s->momentum_buffer(get("momentum_buffer"));
      s->grad_avg(get("grad_avg"));
      return s;
    }
    case Kind::kAdagrad: {
      auto s = std::make_unique<optim::AdagradParamState>();
      s->step(step);
      s->sum(get("sum"));
      return s;
    }
  }
  return nullptr;
}

struct SchedulerAccess : optim::LRScheduler {
  static unsigned optim::LRScheduler::*step_count() { return &SchedulerAccess::step_count_; }
};

}  // namespace

std::string optimizer_state_prefix(size_t group, size_t index) {
  return base::detail::str("optim/g", group, "/p", index, "/");
}

TensorMap optimizer_state_fields(const TensorMap& tensors, size_t group, size_t index) {
  const std::string prefix = optimizer_state_prefix(group, index);
  TensorMap fields;
  for (auto it = tensors.lower_bound(prefix);
       it != tensors.end() && it->first.rfind(prefix, 0) == 0; ++it) {
    fields.emplace(it->first.substr(prefix.size()), it->second);
  }
  return fields;
}

json export_optimizer(const optim::Optimizer& optimizer, TensorMap& tensors) {
  Kind kind = kind_of(optimizer);
  json groups = json::array();
  const auto& param_groups = optimizer.param_groups();
  for (size_t g = 0; g < param_groups.size(); ++g) {
    const auto& params = param_groups[g].params();
    json states = json::array();
    for (size_t i = 0; i < params.size(); ++i) {
      auto found = optimizer.state().find(base::compat::optimizer_state_key(params[i]));
      if (found == optimizer.state().end() || !found->second) {
        states.push_back(nullptr);
        continue;
      }
      StateFields fields = fields_of(kind, *found->second);
      json entry = json::object();
      if (fields.step) entry["step"] = *fields.step;
      for (const auto& [field, tensor] : fields.tensors) {
        if (tensor.defined()) tensors[optimizer_state_prefix(g, i) + field] = tensor;
      }
      states.push_back(std::move(entry));
    }
    groups.push_back({{"options", options_to_json(kind, param_groups[g].options())},
                      {"params", params.size()},
                      {"state", std::move(states)}});
  }
  return {{"type", info_of(kind).name},
          {"defaults", options_to_json(kind, optimizer.defaults())},
          {"groups", std::move(groups)}};
}

void check_optimizer(const std::string& where, const json& description, const TensorMap& tensors,
                     const optim::Optimizer& optimizer) {
  Kind kind = kind_of(optimizer);
  const KindInfo& info = info_of(kind);
  auto fail = [&](const std::string& problem) { throw SnapshotError(where + ": " + problem); };
  try {
    auto type = description.at("type").get<std::string>();
    if (type != info.name) {
      fail("the snapshot holds the state of an optimizer of type " + type + ", this one is " +
           info.name);
    }
    options_from_json(kind, description.at("defaults"), *optimizer.defaults().clone());
    const json& groups = description.at("groups");
    const auto& param_groups = optimizer.param_groups();
    if (!groups.is_array() || groups.size() != param_groups.size()) {
      fail(base::detail::str("the snapshot's optimizer has ", groups.size(),
                             " param groups, this one has ", param_groups.size()));
    }
    std::set<std::string> expected;
    for (size_t g = 0; g < param_groups.size(); ++g) {
      const json& group = groups.at(g);
      const auto& params = param_groups[g].params();
      options_from_json(kind, group.at("options"), *param_groups[g].options().clone());
      const json& states = group.at("state");
      if (group.at("params").get<size_t>() != params.size() || !states.is_array() ||
          states.size() != params.size()) {
        fail(base::detail::str("param group ", g, " has ", group.at("params").dump(),
                               " parameters in the snapshot, ", params.size(), " here"));
      }
      for (size_t i = 0; i < params.size(); ++i) {
        if (states.at(i).is_null()) continue;
        if (info.has_step) (void)states.at(i).at("step").get<int64_t>();
        for (const auto* fields : {&info.required, &info.optional}) {
          for (const auto& field : *fields) {
            std::string name = optimizer_state_prefix(g, i) + field;
            auto found = tensors.find(name);
            if (found == tensors.end()) {
              if (fields == &info.required) fail("optimizer state tensor " + name + " is missing");
              continue;
            }
            expected.insert(name);
            const at::Tensor& t = found->second;
            if (!t.sizes().equals(params[i].sizes()) ||
                t.scalar_type() != params[i].scalar_type()) {
              fail("optimizer state tensor " + name + " is " + describe_tensor(t) +
                   ", its parameter is " + describe_tensor(params[i]));
            }
          }
        }
      }
    }
    for (const auto& entry : tensors) {
      if (entry.first.rfind("optim/", 0) == 0 && expected.count(entry.first) == 0) {
        fail("unexpected optimizer state tensor " + entry.first);
      }
    }
  } catch (const json::exception& e) {
    fail(std::string("malformed optimizer description: ") + e.what());
  }
}

void import_optimizer(const json& description, const TensorMap& tensors,
                      optim::Optimizer& optimizer) {
  Kind kind = kind_of(optimizer);
  options_from_json(kind, description.at("defaults"), optimizer.defaults());
  const json& groups = description.at("groups");
  for (size_t g = 0; g < optimizer.param_groups().size(); ++g) {
    auto& group = optimizer.param_groups()[g];
    options_from_json(kind, groups.at(g).at("options"), group.options());
    const json& states = groups.at(g).at("state");
    for (size_t i = 0; i < group.params().size(); ++i) {
      const at::Tensor& param = group.params()[i];
      const auto key = base::compat::optimizer_state_key(param);
      optimizer.state().erase(key);
      if (states.at(i).is_null()) continue;
      auto get = [&, prefix = optimizer_state_prefix(g, i)](const std::string& field) {
        auto found = tensors.find(prefix + field);
        if (found == tensors.end()) return at::Tensor();
        // A private copy, so that restoring one file twice shares nothing.
        return found->second.to(param.device(), param.scalar_type(), false, /*copy=*/true);
      };
      optimizer.state()[key] = make_state(kind, states.at(i), get);
    }
  }
}

unsigned scheduler_step_count(const optim::LRScheduler& scheduler) {
  return scheduler.*SchedulerAccess::step_count();
}

void set_scheduler_step_count(optim::LRScheduler& scheduler, unsigned count) {
  scheduler.*SchedulerAccess::step_count() = count;
}

}  // namespace ddp::snapshot::detail

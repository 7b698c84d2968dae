#include "snapshot/pytorch_optimizer.hpp"

#include <ATen/ATen.h>

#include <cmath>
#include <map>
#include <utility>

#include "base/str.hpp"
#include "ddp/snapshot/errors.hpp"

namespace ddp::snapshot::detail {
namespace {

using nlohmann::json;
using Kind = PyValue::Kind;

PyRef option_to_python(const std::string& name, const json& value) {
  if (value.is_boolean()) return PyValue::of(value.get<bool>());
  if (value.is_number_integer()) return PyValue::of(value.get<int64_t>());
  if (value.is_number()) return PyValue::of(value.get<double>());
  if (value.is_string()) return PyValue::of(value.get<std::string>());
  if (value.is_array()) {  // betas: PyTorch keeps a tuple
    std::vector<PyRef> items;
    for (const json& item : value) items.push_back(option_to_python(name, item));
    return PyValue::tuple(std::move(items));
  }
  if (value.is_null()) return PyValue::none();
  throw SnapshotError("cannot export the optimizer option " + name + " = " + value.dump());
}

json option_from_python(const std::string& where, const std::string& name, const PyValue& value) {
  switch (value.kind) {
    case Kind::kNone:
      return nullptr;
    case Kind::kBool:
      return value.boolean;
    case Kind::kInt:
      return value.integer;
    case Kind::kFloat:
      return value.floating;
    case Kind::kString:
      return value.text;
    case Kind::kList:
    case Kind::kTuple: {
      json items = json::array();
      for (const auto& item : value.items) items.push_back(option_from_python(where, name, *item));
      return items;
    }
    default:
      throw SnapshotError(where + ": the optimizer option " + name + " is a " + value.type_name() +
                          "; ddp reads options that are numbers, booleans, strings or tuples");
  }
}

// Which PyTorch optimizer a param group's options look like, for messages.
std::string looks_like(const json& options) {
  if (options.contains("betas")) return "Adam's or AdamW's";
  if (options.contains("lr_decay")) return "Adagrad's";
  if (options.contains("alpha")) return "RMSprop's";
  if (options.contains("dampening")) return "SGD's";
  return "an optimizer's ddp does not know";
}

std::string keys_of(const json& object) {
  std::string keys;
  for (const auto& item : object.items()) keys += (keys.empty() ? "" : ", ") + item.key();
  return keys;
}

}  // namespace

PyRef optimizer_to_pytorch(const json& description, const TensorMap& tensors) {
  auto state = PyValue::dict();
  auto groups = PyValue::list();
  int64_t index = 0;
  const json& described = description.at("groups");
  for (size_t g = 0; g < described.size(); ++g) {
    const json& group = described.at(g);
    auto options = PyValue::dict();
    for (const auto& item : group.at("options").items()) {
      options->set(item.key(), option_to_python(item.key(), item.value()));
    }
    auto params = PyValue::list();
    const json& states = group.at("state");
    for (size_t i = 0; i < group.at("params").get<size_t>(); ++i, ++index) {
      params->items.push_back(PyValue::of(index));
      if (states.at(i).is_null()) continue;
      auto entry = PyValue::dict();
      if (states.at(i).contains("step")) {  // PyTorch keeps a 0-dim float32 tensor
        entry->set("step",
                   PyValue::of(at::scalar_tensor(
                       static_cast<double>(states.at(i).at("step").get<int64_t>()), at::kFloat)));
      }
      for (const auto& [field, tensor] : optimizer_state_fields(tensors, g, i)) {
        entry->set(field, PyValue::of(tensor));
      }
      state->set(PyValue::of(index), entry);
    }
    options->set("params", params);
    groups->items.push_back(options);
  }
  auto result = PyValue::dict();
  result->set("state", state);
  result->set("param_groups", groups);
  return result;
}

json optimizer_from_pytorch(const std::string& where, const PyValue& state_dict,
                            const torch::optim::Optimizer& optimizer, TensorMap& tensors) {
  auto fail = [&](const std::string& problem) { throw SnapshotError(where + ": " + problem); };
  const PyRef state = state_dict.kind == Kind::kDict ? state_dict.get("state") : nullptr;
  const PyRef groups = state_dict.kind == Kind::kDict ? state_dict.get("param_groups") : nullptr;
  if (!state || !groups || state->kind != Kind::kDict || groups->kind != Kind::kList) {
    fail("this is not an optimizer's state_dict (a dict of 'state' and 'param_groups')");
  }
  TensorMap live_tensors;
  const json live = export_optimizer(optimizer, live_tensors);
  const json& live_options =
      live.at("groups").empty() ? live.at("defaults") : live.at("groups").at(0).at("options");
  const std::string live_type = live.at("type").get<std::string>();

  json described = json::array();
  std::map<int64_t, std::pair<size_t, size_t>> position;  // index -> (group, position)
  for (size_t g = 0; g < groups->items.size(); ++g) {
    const PyValue& group = *groups->items[g];
    const PyRef params = group.kind == Kind::kDict ? group.get("params") : nullptr;
    if (!params || params->kind != Kind::kList)
      fail(base::detail::str("param group ", g, " has no 'params' list"));
    json options = json::object();
    for (const auto& [key, value] : group.entries) {
      if (key->text != "params") options[key->text] = option_from_python(where, key->text, *value);
    }
    for (const auto& item : live_options.items()) {
      if (!options.contains(item.key())) {
        fail(base::detail::str("param group ", g, " has no option '", item.key(), "', which ",
                               live_type, " has: the file holds ", looks_like(options),
                               " state (options ", keys_of(options),
                               "); load it into that optimizer"));
      }
    }
    if (options.value("maximize", false) == true) {
      fail(base::detail::str("param group ", g, " has maximize=True, which LibTorch's ", live_type,
                             " cannot do; save it with maximize=False"));
    }
    for (size_t i = 0; i < params->items.size(); ++i) {
      if (params->items[i]->kind != Kind::kInt) fail("a param group lists a non-integer index");
      position[params->items[i]->integer] = {g, i};
    }
    described.push_back({{"options", std::move(options)},
                         {"params", params->items.size()},
                         {"state", json(std::vector<json>(params->items.size(), nullptr))}});
  }
  for (const auto& [key, value] : state->entries) {
    auto found = key->kind == Kind::kInt ? position.find(key->integer) : position.end();
    if (found == position.end()) {
      fail(base::detail::str(
          "the state of parameter ",
          key->kind == Kind::kInt ? std::to_string(key->integer) : key->type_name(),
          " belongs to no param group"));
    }
    const auto [g, i] = found->second;
    if (value->kind != Kind::kDict) fail("the state of a parameter is a " + value->type_name());
    json entry = json::object();
    bool any = false;
    for (const auto& [field, item] : value->entries) {
      if (field->text == "step") {
        if (item->kind == Kind::kTensor && item->tensor.numel() == 1) {
          entry["step"] = static_cast<int64_t>(std::llround(item->tensor.item<double>()));
        } else if (item->kind == Kind::kInt || item->kind == Kind::kFloat) {
          entry["step"] = item->kind == Kind::kInt
                              ? item->integer
                              : static_cast<int64_t>(std::llround(item->floating));
        } else {
          fail("a parameter's step is a " + item->type_name());
        }
        any = true;
      } else if (item->kind == Kind::kTensor) {
        tensors[optimizer_state_prefix(g, i) + field->text] = item->tensor;
        any = true;
      } else if (item->kind != Kind::kNone) {
        fail("the state field " + field->text + " is a " + item->type_name() + ", not a tensor");
      }
    }
    if (any) described.at(g).at("state").at(i) = std::move(entry);
  }
  return {{"type", live_type},
          {"defaults", described.empty() ? live.at("defaults") : described.at(0).at("options")},
          {"groups", std::move(described)}};
}

}  // namespace ddp::snapshot::detail

#include "snapshot/consolidated_optimizer.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <set>
#include <vector>

#include "base/str.hpp"
#include "comm/byte_exchange.hpp"
#include "ddp/comm/process_group.hpp"
#include "snapshot/optimizer_state.hpp"

namespace ddp::snapshot::detail {

using json = nlohmann::json;

json gather_full_optimizer(
    const parallel::ShardedState& sharded,
    const std::function<void(const std::string& record, const at::Tensor& value)>& add) {
  ProcessGroup& group = sharded.group();
  TensorMap tensors;
  json description = export_optimizer(sharded.local_optimizer(), tensors);
  const std::vector<parallel::ShardedState::Piece> pieces = sharded.pieces();
  const std::vector<int64_t> numels = sharded.numels();
  const std::vector<std::vector<int64_t>> shapes = sharded.shapes();
  // Where each piece's state is: (group, position) in the optimizer.
  std::vector<std::pair<size_t, size_t>> slots;
  const json& groups = description.at("groups");
  for (size_t g = 0; g < groups.size(); ++g) {
    for (size_t i = 0; i < groups[g].at("params").get<size_t>(); ++i) slots.emplace_back(g, i);
  }
  // Which fields each parameter has and its step, from every rank: a rank
  // whose piece is empty may have no state for it.
  json mine = json::array();
  for (const auto& [g, i] : slots) {
    const json& saved = groups[g].at("state").at(i);
    json fields = json::array();
    for (const auto& [field, tensor] : optimizer_state_fields(tensors, g, i))
      fields.push_back(field);
    mine.push_back({{"fields", fields},
                    {"step", saved.is_object() ? saved.value("step", int64_t{-1}) : int64_t{-2}}});
  }
  std::vector<json> all;
  for (const std::string& text : comm::detail::all_gather_bytes(group, mine.dump())) {
    all.push_back(json::parse(text));
  }
  for (size_t j = 0; j < slots.size(); ++j) {
    const auto [g, i] = slots[j];
    std::set<std::string> fields;
    int64_t step = -2;  // -2: no state anywhere; -1: state without a step
    for (const json& rank : all) {
      for (const json& field : rank.at(j).at("fields")) fields.insert(field.get<std::string>());
      step = std::max(step, rank.at(j).at("step").get<int64_t>());
    }
    json& state = description["groups"][g]["state"][i];
    state = step == -2 ? json(nullptr) : step == -1 ? json::object() : json{{"step", step}};
    const auto& piece = pieces.at(j);
    const std::string prefix = optimizer_state_prefix(g, i);
    for (const std::string& field : fields) {
      const auto found = tensors.find(prefix + field);
      const at::ScalarType dtype =
          found != tensors.end() ? found->second.scalar_type() : at::kFloat;
      at::Tensor full = at::zeros({numels.at(piece.parameter)}, at::TensorOptions(dtype));
      // Note [Replicated shards]: one row's pieces make the whole.
      if (found != tensors.end() && piece.length > 0 && sharded.in_first_row()) {
        full.narrow(0, piece.begin, piece.length)
            .copy_(found->second.detach().reshape(-1).narrow(0, 0, piece.length));
      }
      group.all_reduce(full);  // the pieces do not overlap: their sum is the whole
      if (group.rank() == 0) {
        add(prefix + field, shapes.empty() ? full : full.view(shapes.at(piece.parameter)));
      }
    }
  }
  return description;
}

}  // namespace ddp::snapshot::detail

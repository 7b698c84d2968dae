#include "ddp/elastic/state.hpp"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "comm/byte_exchange.hpp"
#include "ddp/comm/broadcast_tensors.hpp"
#include "ddp/comm/process_group.hpp"
#include "comm/str.hpp"

namespace ddp::elastic {

using nlohmann::json;

State::State(snapshot::TrainingState& training) : training_(training) {}

void State::commit() {
  committed_ = snapshot::capture_training_state(training_);
  ++commits_;
}

void State::restore() {
  if (committed_) snapshot::restore_training_state(*committed_, training_);
}

// The sender describes its commit (the scalars record and every tensor's
// name, dtype and shape) in one broadcast of bytes; the tensors follow in
// one broadcast of packed bytes (ddp::broadcast_tensors), into tensors the
// receivers allocate from the description.
std::optional<int> State::sync(ProcessGroup& group) {
  const int rank = group.rank();
  const int size = group.size();
  at::Tensor counts = at::empty({size}, at::kLong);
  group.all_gather(counts, at::full({1}, commits_, at::kLong));
  const std::vector<int64_t> all(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + size);
  const auto most = std::max_element(all.begin(), all.end());  // the lowest such rank
  if (*most == 0) return std::nullopt;
  const int sender = static_cast<int>(most - all.begin());

  std::string description;
  if (rank == sender) {
    json tensors = json::array();
    for (const auto& [name, tensor] : committed_->tensors) {
      tensors.push_back({name, static_cast<int>(tensor.scalar_type()), tensor.sizes().vec()});
    }
    description = json{{"scalars", committed_->scalars_json}, {"tensors", tensors}}.dump();
  }
  description = comm::detail::broadcast_bytes(group, description, sender);
  snapshot::SnapshotFile received;
  std::vector<at::Tensor> payload;
  if (rank == sender) {
    received = *committed_;
  } else {
    const json parsed = json::parse(description);
    received.scalars_json = parsed.at("scalars").get<std::string>();
    for (const auto& entry : parsed.at("tensors")) {
      const auto dtype = static_cast<at::ScalarType>(entry.at(1).get<int>());
      received.tensors.emplace(entry.at(0).get<std::string>(),
                               at::empty(entry.at(2).get<std::vector<int64_t>>(), dtype));
    }
  }
  for (const auto& entry : received.tensors) payload.push_back(entry.second);
  broadcast_tensors(group, payload, sender);

  received.path = comm::detail::str("(commit ", *most, ", received from rank ", sender, ")");
  received.world_size = 1;  // a commit is one process's (capture_training_state)
  snapshot::restore_training_state(received, training_, rank, size);
  committed_ = snapshot::capture_training_state(training_);  // restore() comes back here
  commits_ = *most;
  return sender;
}

}  // namespace ddp::elastic

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
#include "elastic/commit_layout.hpp"
#include "elastic/shard_buddies.hpp"

namespace ddp::elastic {
namespace {

using nlohmann::json;

// The training state without its sharded optimizer while it lives: what
// capture_training_state() and restore_training_state() see of a commit
// (the shards travel apart, Note [ZeRO shards in memory]). The pointer is
// only set aside, never followed: in sync() it may be a dead generation's.
class ShardedOptimizerAside {
 public:
  explicit ShardedOptimizerAside(snapshot::TrainingState& training)
      : training_(training), zero_(training.zero_optimizer) {
    training_.zero_optimizer = nullptr;
  }
  ~ShardedOptimizerAside() { training_.zero_optimizer = zero_; }
  ShardedOptimizerAside(const ShardedOptimizerAside&) = delete;
  ShardedOptimizerAside& operator=(const ShardedOptimizerAside&) = delete;

 private:
  snapshot::TrainingState& training_;
  ZeroRedundancyOptimizer* zero_;
};

}  // namespace

State::State(snapshot::TrainingState& training) : training_(training) {}

void State::commit() {
  ZeroRedundancyOptimizer* zero = training_.zero_optimizer;
  if (zero != nullptr && training_.optimizer != nullptr) {
    throw SnapshotError(
        "cannot commit: the training state has both an optimizer and a zero_optimizer; set the "
        "one in use");
  }
  std::optional<snapshot::SnapshotFile> captured;
  {
    ShardedOptimizerAside aside(training_);
    captured = snapshot::capture_training_state(training_);
  }
  std::shared_ptr<const detail::ShardCommit> shards;
  if (zero != nullptr) {  // a collective over the optimizer's group
    shards =
        std::make_shared<const detail::ShardCommit>(detail::commit_shards(*zero, commits_ + 1));
  }
  committed_ = std::move(captured);
  shards_ = std::move(shards);
  ++commits_;
  if (on_commit_) on_commit_();
}

void State::restore() {
  if (!committed_) return;
  if ((shards_ != nullptr) != (training_.zero_optimizer != nullptr)) {
    throw SnapshotError(comm::detail::str(
        "cannot restore commit ", commits_, ": it holds ", shards_ ? "" : "no ",
        "ZeroRedundancyOptimizer shards and TrainingState::zero_optimizer is ",
        training_.zero_optimizer ? "set" : "null",
        "; point zero_optimizer at this generation's optimizer exactly when the commits were "
        "made with one"));
  }
  {
    ShardedOptimizerAside aside(training_);
    snapshot::restore_training_state(*committed_, training_);
  }
  if (shards_) detail::restore_shards(*shards_, *training_.zero_optimizer);
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
    description = json{{"scalars", committed_->scalars_json},
                       {"tensors", detail::tensor_layout(*committed_)},
                       {"zero", shards_ ? shards_->record : json(nullptr)}}
                      .dump();
  }
  description = comm::detail::broadcast_bytes(group, description, sender);
  const json parsed = json::parse(description);
  // The shards first: a lost one fails the sync before anything changes.
  std::shared_ptr<const detail::ShardCommit> shards;
  if (!parsed.at("zero").is_null()) {
    shards = std::make_shared<const detail::ShardCommit>(
        detail::sync_shards(group, shards_.get(), parsed.at("zero"), *most));
  }
  snapshot::SnapshotFile received;
  std::vector<at::Tensor> payload;
  if (rank == sender) {
    received = *committed_;
  } else {
    received =
        detail::allocate_from_layout(parsed.at("scalars").get<std::string>(), parsed.at("tensors"));
  }
  for (const auto& entry : received.tensors) payload.push_back(entry.second);
  broadcast_tensors(group, payload, sender);

  received.path = comm::detail::str("(commit ", *most, ", received from rank ", sender, ")");
  received.world_size = 1;  // a commit is one process's (capture_training_state)
  {
    ShardedOptimizerAside aside(training_);
    snapshot::restore_training_state(received, training_, rank, size);
    committed_ = snapshot::capture_training_state(training_);  // restore() comes back here
  }
  shards_ = std::move(shards);
  commits_ = *most;
  return sender;
}

}  // namespace ddp::elastic

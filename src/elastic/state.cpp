#include "ddp/elastic/state.hpp"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "base/str.hpp"
#include "comm/byte_exchange.hpp"
#include "ddp/comm/broadcast_tensors.hpp"
#include "ddp/comm/process_group.hpp"
#include "elastic/commit_layout.hpp"
#include "elastic/shard_buddies.hpp"
#include "snapshot/sharded_state.hpp"
#include "snapshot/state_records.hpp"

namespace ddp::elastic {
namespace {

using nlohmann::json;

}  // namespace

State::State(snapshot::TrainingState& training) : training_(training) {}

// The sharded part travels apart from the rest of a commit (Note [Sharded
// state in memory]): capture_unsharded() and restore_unsharded() leave it out.
void State::commit() {
  const parallel::ShardedState* sharded = snapshot::detail::sharded_part(training_);
  std::optional<snapshot::SnapshotFile> captured = snapshot::detail::capture_unsharded(training_);
  std::shared_ptr<const detail::ShardCommit> shards;
  if (sharded != nullptr) {  // a collective over the sharded state's group
    shards =
        std::make_shared<const detail::ShardCommit>(detail::commit_shards(*sharded, commits_ + 1));
  }
  committed_ = std::move(captured);
  shards_ = std::move(shards);
  ++commits_;
  if (on_commit_) on_commit_();
}

void State::restore() {
  if (!committed_) return;
  parallel::ShardedState* sharded = snapshot::detail::sharded_part(training_);
  if ((shards_ != nullptr) != (sharded != nullptr)) {
    // The kind of shards the commit holds, or the kind the state points at.
    const std::string kind =
        shards_
            ? shards_->record.value("kind", std::string("ZeroRedundancyOptimizer"))
            : (training_.zero_optimizer ? "ZeroRedundancyOptimizer" : "FullyShardedDataParallel");
    const char* field = kind == "ZeroRedundancyOptimizer" ? "zero_optimizer" : "fully_sharded";
    throw SnapshotError(base::detail::str(
        "cannot restore commit ", commits_, ": it holds ", shards_ ? "" : "no ", kind,
        " shards and TrainingState::", field, " is ", sharded ? "set" : "null", "; point ", field,
        " at this generation's exactly when the commits were made with one"));
  }
  snapshot::detail::restore_unsharded(*committed_, training_);
  if (shards_) detail::restore_shards(*shards_, *sharded);
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

  received.path = base::detail::str("(commit ", *most, ", received from rank ", sender, ")");
  received.world_size = 1;  // a commit is one process's (capture_training_state)
  snapshot::detail::restore_unsharded(received, training_, rank, size);
  committed_ = snapshot::detail::capture_unsharded(training_);  // restore() comes back here
  shards_ = std::move(shards);
  commits_ = *most;
  return sender;
}

}  // namespace ddp::elastic

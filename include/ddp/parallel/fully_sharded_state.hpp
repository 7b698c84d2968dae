#pragma once

/// \file fully_sharded_state.hpp
/// A FullyShardedDataParallel model and its optimizer as one sharded state,
/// for snapshots and elastic recovery.
///
/// \code
///   ddp::FullyShardedDataParallel model(net, group);
///   torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
///   ddp::FullyShardedState sharded(model, optimizer);
///   ddp::snapshot::SnapshotManager snapshots(ddp::snapshot::SnapshotOptions("ckpt"), group);
///   ddp::snapshot::TrainingState state;
///   state.model = model->module().get();  // its buffers; the parameters are in the shards
///   state.fully_sharded = &sharded;
///   snapshots.resume(state);              // each rank reads the shards it needs
///   snapshots.save(state);                // each rank writes its shard
/// \endcode
///
/// Each rank saves its shard of every unit (the parameters' elements and the
/// optimizer's state for them); a job resumes at any world size
/// (Note [A shard's pieces] in ddp/parallel/sharded_state.hpp).

#include <memory>
#include <vector>

#include "ddp/parallel/fully_sharded_data_parallel.hpp"
#include "ddp/parallel/sharded_state.hpp"

namespace ddp::parallel {

/// FullyShardedDataParallel's shards and the optimizer that steps them.
class FullyShardedState final : public ShardedState {
 public:
  /// `optimizer` must have one param group holding `model`'s parameters()
  /// (the shards), in order; both must outlive this object.
  /// \throws ConfigError naming what differs.
  FullyShardedState(const FullyShardedDataParallel& model, torch::optim::Optimizer& optimizer);

  ProcessGroup& group() const override;
  /// Each unit's elements, without padding, in unit order.
  std::vector<int64_t> numels() const override { return numels_; }
  /// One piece per unit: the unit's elements in this rank's shard.
  std::vector<Piece> pieces() const override;
  torch::optim::Optimizer& local_optimizer() override { return optimizer_; }
  const torch::optim::Optimizer& local_optimizer() const override { return optimizer_; }
  bool holds_values() const override { return true; }

 private:
  std::shared_ptr<FullyShardedDataParallelImpl> model_;
  torch::optim::Optimizer& optimizer_;
  std::vector<int64_t> numels_;
};

}  // namespace ddp::parallel

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
/// Each rank saves its piece of every parameter (its elements and the
/// optimizer's state for them), keyed by the parameter's name and shape; a
/// job resumes at any world size, with another wrap policy too
/// (Note [A shard's pieces] in ddp/parallel/sharded_state.hpp). A hybrid
/// model's (a device_mesh) is saved by its first row and resumes at any
/// shape, hybrid or not (Note [Replicated shards]).

#include <memory>
#include <string>
#include <vector>

#include "ddp/parallel/fully_sharded_data_parallel.hpp"
#include "ddp/parallel/sharded_state.hpp"

namespace ddp::parallel {

/// FullyShardedDataParallel's shards and the optimizer that steps them.
class FullyShardedState final : public ShardedState {
 public:
  /// `optimizer` holds `model`'s parameters() (this rank's pieces), each at
  /// most once, in any param groups and order: every one, or the trainable
  /// ones only, as PyTorch's fine-tuning recipes do (those it leaves out
  /// are saved as values, Note [Pieces outside the optimizer]). Both must
  /// outlive this object.
  /// \throws ConfigError naming a parameter held twice, or a foreign one.
  FullyShardedState(const FullyShardedDataParallel& model, torch::optim::Optimizer& optimizer);

  /// The world the model was made over.
  ProcessGroup& group() const override;
  /// The ranks of a row of the model's device_mesh (Note [Replicated
  /// shards]); the world's size without one.
  int shard_size() const override;
  /// Each of the model's parameters' elements, in parameters() order.
  std::vector<int64_t> numels() const override { return numels_; }
  std::vector<std::string> names() const override { return names_; }
  std::vector<std::vector<int64_t>> shapes() const override { return shapes_; }
  /// One piece per parameter of the optimizer, then one per parameter it
  /// leaves out: the run of its elements this rank holds (often none).
  std::vector<Piece> pieces() const override { return pieces_; }
  torch::optim::Optimizer& local_optimizer() override { return optimizer_; }
  const torch::optim::Optimizer& local_optimizer() const override { return optimizer_; }
  bool holds_values() const override { return true; }
  std::vector<at::Tensor> unstepped_values() const override { return unstepped_; }

 private:
  std::shared_ptr<FullyShardedDataParallelImpl> model_;
  torch::optim::Optimizer& optimizer_;
  std::vector<int64_t> numels_;
  std::vector<std::string> names_;
  std::vector<std::vector<int64_t>> shapes_;
  std::vector<Piece> pieces_;
  std::vector<at::Tensor> unstepped_;
};

}  // namespace ddp::parallel

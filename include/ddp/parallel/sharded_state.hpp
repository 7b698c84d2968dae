#pragma once

/// \file sharded_state.hpp
/// What snapshots (ddp/snapshot/snapshot_manager.hpp) and elastic::State
/// (ddp/elastic/state.hpp) need of training state that is sharded across
/// ranks: which elements of which flattened parameter each rank holds, the
/// optimizer over them, and, where the parameters themselves live only in
/// the shards, their values. ZeroRedundancyOptimizer shards the optimizer
/// state; FullyShardedState (FullyShardedDataParallel with its optimizer)
/// shards the parameters too.
///
/// Note [A shard's pieces]
/// A piece is a run of elements of one flattened parameter. Piece j of a
/// rank is the first `length` elements of its local optimizer's parameter
/// j, which may hold more (FSDP pads a unit's last shard with zeros; a
/// rank whose shard is all padding owns a piece of length 0). Snapshots
/// save each piece's elements and nothing of the padding, so a job resumes
/// at any world size by cutting its new pieces out of the saved ones.
///
/// Note [Pieces outside the optimizer]
/// PyTorch's fine-tuning recipes give the optimizer the trainable
/// parameters only (`AdamW(p for p in model.parameters() if
/// p.requires_grad)`). Where the parameters live only in the shards
/// (holds_values()), the pieces of those left out still have to be saved:
/// they follow the optimizer's pieces, their tensors are
/// unstepped_values(), and they are saved and restored as values alone,
/// with no optimizer state. A piece stepped when it was saved and not when
/// it is loaded drops its state; one loaded into an optimizer that steps
/// it starts without state, as a parameter newly given to a PyTorch
/// optimizer does.
///
/// Note [Replicated shards]
/// A hybrid-sharded state (FullyShardedDataParallelOptions::device_mesh)
/// is sharded over rows of shard_size() consecutive ranks of group(), each
/// row holding every piece once: rank r holds the pieces of rank
/// r mod shard_size(). Snapshot files and distributed checkpoints are
/// written by the first row alone (the other rows would write the same
/// elements again), so they resume at any shape, hybrid or not. A commit
/// in memory (elastic::State) keeps every rank's pieces, so that a lost
/// rank's shard survives on its buddy as without rows; cutting a new
/// partition out of it takes each piece from the first of its copies (the
/// ranks at its place in each row) whose shard is at hand.

#include <ATen/core/Tensor.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <string>
#include <vector>

#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::parallel {

/// Training state sharded across the ranks of a process group.
class ShardedState {
 public:
  /// A run of elements of one flattened parameter that this rank owns.
  struct Piece {
    size_t parameter = 0;  ///< Index into numels().
    int64_t begin = 0;     ///< First element, in the flattened parameter.
    int64_t length = 0;    ///< Elements.
  };

  virtual ~ShardedState() = default;

  /// The group the state is sharded over.
  virtual ProcessGroup& group() const = 0;
  /// The ranks of group() one copy of the state is sharded over: fewer
  /// than group().size() where rows of them replicate it (Note [Replicated
  /// shards]).
  virtual int shard_size() const;
  /// Whether this rank is in the first row: the one that writes the pieces
  /// to files.
  bool in_first_row() const;
  /// Elements of every flattened parameter the pieces refer to.
  virtual std::vector<int64_t> numels() const = 0;
  /// Their names and shapes, where known (empty otherwise): a snapshot
  /// that records them is resumed by name, its shapes checked, so that
  /// parameters registered in another order still find their elements.
  virtual std::vector<std::string> names() const { return {}; }
  virtual std::vector<std::vector<int64_t>> shapes() const { return {}; }
  /// This rank's pieces, in the order of local_optimizer()'s parameters,
  /// group after group (Note [A shard's pieces]), then those of
  /// unstepped_values() (Note [Pieces outside the optimizer]).
  virtual std::vector<Piece> pieces() const = 0;
  /// The optimizer over this rank's pieces, in one or more param groups.
  virtual torch::optim::Optimizer& local_optimizer() = 0;
  virtual const torch::optim::Optimizer& local_optimizer() const = 0;
  /// Whether the pieces' values are saved with the shard and restored from
  /// it (the parameters exist nowhere else); then local_optimizer()'s
  /// parameters are those values.
  virtual bool holds_values() const { return false; }
  /// Where holds_values(): the local tensors of the pieces no optimizer
  /// steps, in the order pieces() lists them after the optimizer's.
  virtual std::vector<at::Tensor> unstepped_values() const { return {}; }
};

}  // namespace ddp::parallel

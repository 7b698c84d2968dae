#pragma once

/// \file device_mesh.hpp
/// A job's ranks as a 2-D mesh, replicas × shards, in PyTorch's DeviceMesh
/// vocabulary: the groups hybrid sharding communicates in
/// (FullyShardedDataParallelOptions::device_mesh). A row holds one replica
/// of the model, sharded across its ranks (typically a node, whose links
/// are fast); a column holds the ranks at the same place of every row, which
/// all-reduce their shards' gradients (across the slow links).
///
/// \code
///   auto world = ddp::init();
///   auto mesh = ddp::DeviceMesh::by_node(world);  // a row per node
///   at::Tensor t = at::ones({4});
///   mesh->shard_group()->all_reduce(t);           // this node's ranks
///   mesh->replicate_group()->all_reduce(t);       // this place in every node
/// \endcode

#include <memory>
#include <string>

#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::comm {

/// Note [A mesh's groups]
/// Rank r of the world sits in row r / shard and column r % shard, as
/// PyTorch's init_device_mesh((replicate, shard)) lays it out (row-major).
/// Each row and each column is a process group of its own, made through the
/// world's rendezvous store under a prefix numbered by the meshes this
/// rank made before through that store (a count kept in the store, not in
/// the process: every rank makes the same meshes in the same order, and a
/// replacement that joins a new generation of an elastic job counts from
/// where its peers do): a row whose ranks share one node (Note [What
/// counts as one node]) runs on shared memory, any other group on Gloo.
/// Its ranks are numbered in world order; its collective timeout is the
/// world's.
class DeviceMesh {
 public:
  /// `replicate` rows of `shard` ranks of `world` (made by ddp::init()). A
  /// collective over `world`: every rank calls it with the same shape.
  /// \throws ConfigError when replicate × shard is not the world size, a
  ///   dimension is below 1, or `world` has no rendezvous store.
  DeviceMesh(std::shared_ptr<ProcessGroup> world, int replicate, int shard);
  /// One row per node, as the rendezvous finds them: the nodes must hold
  /// the same number of ranks, and each node consecutive ranks (ddprun's,
  /// torchrun's and Slurm's block layout).
  /// \throws ConfigError naming the nodes otherwise.
  static std::shared_ptr<DeviceMesh> by_node(std::shared_ptr<ProcessGroup> world);

  /// Rows: copies of the model.
  int replicate() const { return replicate_; }
  /// Ranks per row: the shards of each copy.
  int shard() const { return shard_; }
  /// This rank's row, and its place in the row.
  int replicate_rank() const;
  int shard_rank() const;
  /// "replicate × shard" with each dimension's size and backend.
  std::string describe() const;

  const std::shared_ptr<ProcessGroup>& world() const { return world_; }
  /// The ranks of this rank's row.
  const std::shared_ptr<ProcessGroup>& shard_group() const { return shard_group_; }
  /// The ranks of this rank's column.
  const std::shared_ptr<ProcessGroup>& replicate_group() const { return replicate_group_; }

 private:
  std::shared_ptr<ProcessGroup> world_;
  int replicate_ = 1;
  int shard_ = 1;
  std::shared_ptr<ProcessGroup> shard_group_;
  std::shared_ptr<ProcessGroup> replicate_group_;
};

}  // namespace ddp::comm

namespace ddp {
using namespace comm;  // Note [One namespace per layer] in ddp/ddp.hpp
}  // namespace ddp

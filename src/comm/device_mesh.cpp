#include "ddp/comm/device_mesh.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "base/str.hpp"
#include "comm/backends/backends.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"

namespace ddp::comm {
namespace {

constexpr const char* kWho = "DeviceMesh";

base::compat::StorePtr world_store(const ProcessGroup& world) {
  const auto& store = world.rendezvous_store();
  if (!store) {
    throw ConfigError(base::detail::str(
        kWho,
        ": the world group has no rendezvous store to make the mesh's groups through; "
        "make it with ddp::init()."));
  }
  // ddp::init() keeps the store in an intrusive_ptr the group shares.
  return c10::intrusive_ptr<c10d::Store>::reclaim_copy(store.get());
}

// Note [A mesh's groups]: the prefix of this rank's next mesh in `store`,
// numbered by the meshes it made through the store before.
std::string next_prefix(const ProcessGroup& world, const base::compat::StorePtr& store) {
  const int64_t made = store->add(base::detail::str("ddp/mesh/made/", world.rank()), 1);
  return base::detail::str("ddp/mesh/", made, "/");
}

backends::BackendContext context_for(const ProcessGroup& world, const base::compat::StorePtr& store,
                                     const std::string& prefix, int rank, int size) {
  backends::BackendContext context;
  context.topology = world.topology();
  context.topology.rank = rank;
  context.topology.world_size = size;
  context.collective_timeout = world.collective_timeout();
  context.store = c10::make_intrusive<c10d::PrefixStore>(prefix, store);
  return context;
}

// The group of `ranks` (world ranks, ascending, this rank among them):
// shared memory when they share a node, Gloo otherwise.
std::shared_ptr<ProcessGroup> make_subgroup(const ProcessGroup& world,
                                            const base::compat::StorePtr& store,
                                            const std::string& prefix,
                                            const std::vector<int>& ranks) {
  const int me =
      static_cast<int>(std::find(ranks.begin(), ranks.end(), world.rank()) - ranks.begin());
  const auto context = context_for(world, store, prefix, me, static_cast<int>(ranks.size()));
  const auto nodes = backends::group_ranks_by_node(context);
  if (nodes.size() == 1) return backends::make_shm_process_group(context, nodes);
  return backends::make_gloo_process_group(context);
}

void check_world(const std::shared_ptr<ProcessGroup>& world) {
  if (!world) {
    throw ConfigError(base::detail::str(
        kWho, ": the world group is null; pass the group returned by ddp::init()."));
  }
}

}  // namespace

DeviceMesh::DeviceMesh(std::shared_ptr<ProcessGroup> world, int replicate, int shard)
    : world_(std::move(world)), replicate_(replicate), shard_(shard) {
  check_world(world_);
  if (replicate < 1 || shard < 1 || replicate * shard != world_->size()) {
    throw ConfigError(base::detail::str(
        kWho, ": a mesh of ", replicate, " x ", shard, " ranks for a world of ", world_->size(),
        "; replicate x shard must be the world size, each at least 1."));
  }
  const auto store = world_store(*world_);
  const std::string prefix = next_prefix(*world_, store);
  const int row = replicate_rank(), column = shard_rank();
  std::vector<int> row_ranks, column_ranks;
  for (int c = 0; c < shard_; ++c) row_ranks.push_back(row * shard_ + c);
  for (int r = 0; r < replicate_; ++r) column_ranks.push_back(r * shard_ + column);
  // Every rank makes its row first, then its column: no rank waits for a
  // peer that is still making another group.
  shard_group_ = make_subgroup(*world_, store, base::detail::str(prefix, "row", row), row_ranks);
  replicate_group_ =
      make_subgroup(*world_, store, base::detail::str(prefix, "column", column), column_ranks);
}

std::shared_ptr<DeviceMesh> DeviceMesh::by_node(std::shared_ptr<ProcessGroup> world) {
  check_world(world);
  const auto store = world_store(*world);
  const auto nodes = backends::group_ranks_by_node(context_for(
      *world, store, next_prefix(*world, store) + "nodes", world->rank(), world->size()));
  const size_t per_node = nodes.front().size();
  bool blocks = true;
  std::string layout;
  for (size_t k = 0; k < nodes.size(); ++k) {
    layout += base::detail::str(k == 0 ? "" : ", ", "node ", k, ": ranks ", nodes[k].front(), "-",
                                nodes[k].back());
    blocks = blocks && nodes[k].size() == per_node &&
             nodes[k].front() == static_cast<int>(k * per_node) &&
             nodes[k].back() == static_cast<int>((k + 1) * per_node - 1);
  }
  if (!blocks) {
    throw ConfigError(base::detail::str(
        kWho, "::by_node: the ", world->size(), " ranks are on ", nodes.size(), " nodes (", layout,
        "); a row per node needs the same number of consecutive ranks on every node: launch as "
        "many ranks on each node, or give the shape with DeviceMesh(world, replicate, shard)."));
  }
  return std::make_shared<DeviceMesh>(std::move(world), static_cast<int>(nodes.size()),
                                      static_cast<int>(per_node));
}

int DeviceMesh::replicate_rank() const { return world_->rank() / shard_; }

int DeviceMesh::shard_rank() const { return world_->rank() % shard_; }

std::string DeviceMesh::describe() const {
  return base::detail::str(replicate_, " x ", shard_, " (replicate over ",
                           replicate_group_->backend_name(), ", shard over ",
                           shard_group_->backend_name(), ")");
}

}  // namespace ddp::comm

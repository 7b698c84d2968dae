// Which ranks share a node, agreed through the rendezvous store.
//
// Note [What counts as one node]
// Two ranks may share memory when they run under one kernel: the same host
// name and boot id. The launcher's node index (GROUP_RANK, SLURM_NODEID) is
// part of the identity too, so a job that a launcher lays out as several
// nodes on one machine (tests, network namespaces) is treated as such.

#include <unistd.h>

#include <fstream>
#include <map>

#include "base/str.hpp"
#include "comm/backends/backends.hpp"
#include "ddp/base/errors.hpp"

namespace ddp::comm::backends {
namespace {

std::string node_identity(const Topology& topology) {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  return base::detail::str(host, "/", boot, "/", topology.group_rank);
}

}  // namespace

std::vector<std::vector<int>> group_ranks_by_node(const BackendContext& context) {
  const Topology& topology = context.topology;
  if (topology.world_size == 1) return {{0}};
  const std::string own = node_identity(topology);
  auto key = [](int rank) { return base::detail::str("ddp/node/", rank); };
  context.store->set(key(topology.rank), std::vector<uint8_t>(own.begin(), own.end()));
  std::vector<std::string> keys;
  for (int r = 0; r < topology.world_size; ++r) keys.push_back(key(r));
  context.store->wait(keys, context.collective_timeout);
  std::vector<std::vector<int>> nodes;
  std::map<std::string, size_t> node_of_identity;
  for (int r = 0; r < topology.world_size; ++r) {
    const auto bytes = context.store->get(key(r));
    const std::string identity(bytes.begin(), bytes.end());
    auto [entry, added] = node_of_identity.emplace(identity, nodes.size());
    if (added) nodes.emplace_back();
    nodes[entry->second].push_back(r);
  }
  // Rank 0 hosts the store: it waits until every rank has read the layout,
  // so that a layout error reaches every rank instead of a lost store.
  auto done = [](int rank) { return base::detail::str("ddp/node-read/", rank); };
  context.store->set(done(topology.rank), std::vector<uint8_t>{1});
  if (topology.rank == 0) {
    std::vector<std::string> all_done;
    for (int r = 0; r < topology.world_size; ++r) all_done.push_back(done(r));
    context.store->wait(all_done, context.collective_timeout);
  }
  return nodes;
}

}  // namespace ddp::comm::backends

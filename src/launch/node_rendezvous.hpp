#pragma once

// Internal: how the agents of a job's nodes meet: which one hosts the
// agents' store, each node's rank and how many nodes the job has.
//
// Note [How nodes meet]
// Both of torchrun's backends, with its options:
// - static (its default): every node is given --nnodes N and its own
//   --node-rank; node 0 hosts the store at --master-addr:--master-port (or
//   --rdzv-endpoint), the others connect to it.
// - c10d: every node is started alike with --rdzv-endpoint HOST[:PORT].
//   The node that can bind the endpoint hosts the store and is node 0 (when
//   the bind fails, because HOST is another machine or the port is taken,
//   the node connects instead; --rdzv-conf is_host=true|false decides
//   outright). The others take ranks 1, 2, ... in the order they join, from
//   a counter in the store. The host closes the round once MAX nodes have
//   joined, or once MIN have and last_call_timeout has passed since the
//   MIN-th, and publishes the node count; fewer than MIN within
//   join_timeout is a TimeoutError on every node. A node that joins a
//   round already closed is refused with the node count it missed.
// The host first claims the run id (--rdzv-id), so two jobs that share an
// endpoint never merge. One node needs no network: an in-memory store.

#include <c10/util/intrusive_ptr.h>

#include <string>

#include "launch/launch_options.hpp"

namespace c10d {
class Store;
}  // namespace c10d

namespace ddp::launch {

/// Where this node stands once the nodes have met.
struct NodeAssignment {
  c10::intrusive_ptr<c10d::Store> store;  ///< the agents' store
  int node_rank = 0;                      ///< GROUP_RANK; 0 hosts the store
  int nnodes = 1;                         ///< GROUP_WORLD_SIZE
  /// The address the workers meet at (MASTER_ADDR): node 0's.
  std::string master_addr = "127.0.0.1";
};

/// Meets the job's other nodes (Note [How nodes meet]), authenticating the
/// agents' store with `secret` when it is not empty.
/// \throws ddp::RendezvousError when the store cannot be hosted or reached,
///   belongs to another run id, or the round closed without this node;
///   ddp::TimeoutError when fewer than --nnodes MIN nodes join in time.
NodeAssignment meet_nodes(const LaunchPlan& plan, const std::string& secret);

}  // namespace ddp::launch

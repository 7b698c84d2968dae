#pragma once

// Internal: who hosts the agents' store when its host is lost (Note [A new
// host] in launch/node_rendezvous.hpp).

#include <c10/util/intrusive_ptr.h>

#include <optional>
#include <string>
#include <vector>

#include "ddp/launch/port_reservation.hpp"
#include "launch/launch_options.hpp"

namespace c10d {
class Store;
}  // namespace c10d

namespace ddp::launch {

/// The store the survivors meet in after a take-over.
struct SuccessorStore {
  c10::intrusive_ptr<c10d::Store> store;
  bool host = false;     ///< this node hosts it
  std::string endpoint;  ///< HOST:PORT
  int after_round = 0;   ///< the last round of the lost host
  int nodes_before = 0;  ///< that round's node count
};

/// One node's part in the succession: each healthy round of three nodes
/// or more, every node but the host reserves a port and publishes it as
/// its standby endpoint, and every node learns the list; after the host is
/// lost, the survivors take the standbys in order of node rank.
class HostSuccession {
 public:
  HostSuccession(const LaunchPlan& plan, std::string secret);

  /// After `round` closed with `nnodes` nodes, this one being `node_rank`
  /// at `address`: publishes this node's standby endpoint under `prefix`
  /// (the round's key prefix) unless it hosts, then reads every node's.
  /// \throws ddp::TimeoutError when a node publishes none within
  ///   join_timeout; ddp::LaunchError when no port can be reserved.
  void publish(c10d::Store& store, const std::string& prefix, int round, int nnodes, int node_rank,
               const std::string& address);

  /// Whether this node can take part in a take-over: it knows a
  /// succession and is not the host that was lost.
  bool ready() const { return !standbys_.empty() && node_rank_ > 0; }

  /// The take-over, after the store at `lost` was lost for `why`: the
  /// standbys in order, the first that answers (or this node, in its turn)
  /// hosting the new store, which carries `run_id`.
  /// \throws ddp::RendezvousError when no standby answers within
  ///   takeover_timeout each.
  SuccessorStore take_over(const std::string& lost, const std::string& why);

 private:
  c10::intrusive_ptr<c10d::Store> host_at(const std::string& endpoint);
  c10::intrusive_ptr<c10d::Store> join_at(const std::string& endpoint, int candidate);

  const LaunchPlan& plan_;
  std::string secret_;
  std::optional<PortReservation> reserved_;  // this node's standby port
  std::vector<std::string> standbys_;        // by node rank; [0] is the host
  int round_ = -1;
  int node_rank_ = 0;
  int takeovers_ = 0;
};

}  // namespace ddp::launch

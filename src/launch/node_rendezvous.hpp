#pragma once

// Internal: how the agents of a job's nodes meet: which one hosts the
// agents' store, each node's rank and how many nodes the job has.
//
// Note [How nodes meet]
// Both of torchrun's backends, with its options:
// - static (its default): every node is given --nnodes N and its own
//   --node-rank; node 0 hosts the store at --master-addr:--master-port (or
//   --rdzv-endpoint), the others connect to it. The nodes never change.
// - c10d: every node is started alike with --rdzv-endpoint HOST[:PORT].
//   The node that can bind the endpoint hosts the store and is node 0 (when
//   the bind fails, because HOST is another machine or the port is taken,
//   the node connects instead; --rdzv-conf is_host=true|false decides
//   outright). The job runs in rounds: for each, the others take ranks 1,
//   2, ... in the order they join, from a counter in the store. The host
//   closes a round once MAX nodes have joined, or once MIN have and
//   last_call_timeout has passed since the MIN-th, and publishes its node
//   count; fewer than MIN within join_timeout is a TimeoutError on every
//   node.
// Membership changes (c10d): a node that arrives while round r runs joins
// round r + 1. The running agents see that round r + 1 has a member
// (nodes_waiting()), stop their workers and join it too, so the job
// re-forms with every live node, its ranks reassigned; this costs no
// restart. Under --recovery memory they keep their workers instead, which
// move to the larger job at a commit (Note [A node joins in memory] in
// ddp/elastic/run.hpp). After a failure every agent also joins the next round, so a node
// that died is simply absent from it, and the job goes on while MIN nodes
// remain. The host's own loss: Note [A new host].
// Note [Spare nodes]: a node that arrives while the job runs at MAX nodes
// joins round r + 1 as a spare and says so; the running agents do not stop
// for it. It gets a place when the job re-forms after a failure (every
// agent joins round r + 1, and a lost node no longer does; a node that
// joins after the round is full waits as a spare in its turn). With no
// place within join_timeout it withdraws and ends with a RendezvousError;
// when the job ends first, the host tells it (rdzv/ended) and it exits 0.
// The host first claims the run id (--rdzv-id), so two jobs that share an
// endpoint never merge. One node needs no network: an in-memory store.
//
// Note [A new host]
// The store lives in its host's agent, so losing node 0 loses it. With the
// c10d backend and three nodes or more, every round also names successors:
// once it closes, each other node reserves a port (Note [A port held from
// choice to use]) and publishes it as its standby endpoint
// (rdzv/<r>/standby/<node>), and every node reads the list. An agent that
// loses the store (RendezvousError) walks the list in order of node rank:
// in its own turn it hosts a new, empty store at its standby endpoint;
// otherwise it connects to the candidate, retrying for takeover_timeout,
// and accepts the store only when it names the same run and says it took
// over from the same round (ddprun/takeover = "<count>:<round>"); a
// candidate that does not answer in time is taken as lost too. The new host
// is node 0 of round r + 1, which closes once every node of round r but the
// lost host has joined, or after last_call_timeout with more than half of
// them (a quorum: a minority cut off from the others never forms a job of
// its own). What the old store held is not carried over: the agents know
// the run, the round and their restarts. The workers start again from
// their snapshots, or under --recovery memory keep their processes: the
// agents host a new recovery store, name it in DDP_RECOVERY_STORE_FILE and
// seat each worker at the smaller layout (Note [Recovery in memory] in
// ddp/elastic/run.hpp). Two nodes cannot succeed each other: one survivor
// is not a majority.
// The old host keeps the same rule from its side: a round after one of
// three nodes or more closes only when at least half of that round's nodes
// came back (the host among them; rdzv/<r>/returning counts the others)
// within last_call_timeout. Cut off from a majority, which may have
// re-formed around a standby, it ends with a RendezvousError instead of
// running the job a second time
// (split brain: two jobs writing the same snapshots). So losing more than
// half of the nodes at once ends the job, wherever the host is.
// A machine that vanishes without closing its connections (a hang, a
// partition) is noticed by the store's reply timeout: while workers run,
// every other agent's store call gets node_timeout (plus the store's grace
// of 5 s) to be answered, and a silent host is then a lost one. The host's
// own agent serves its store and waits as before: paused and continued, it
// would otherwise find its own calls past their bound.

#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <memory>
#include <string>

#include "launch/launch_options.hpp"

namespace c10d {
class Store;
}  // namespace c10d

namespace ddp::launch {

class HostSuccession;

/// Where this node stands in one round, once the nodes have met.
struct NodeAssignment {
  int round = 0;      ///< the rendezvous round: 0, then one more per re-forming
  int node_rank = 0;  ///< GROUP_RANK; 0 hosts the store
  int nnodes = 1;     ///< GROUP_WORLD_SIZE
  /// The address the workers meet at (MASTER_ADDR): node 0's.
  std::string master_addr = "127.0.0.1";
  /// A spare node whose job ended before a place opened (Note [Spare
  /// nodes]): it has nothing to do.
  bool job_ended = false;
};

/// This node's side of the rendezvous (Note [How nodes meet]).
class NodeRendezvous {
 public:
  /// Hosts or joins the agents' store, authenticated with `secret` when it
  /// is not empty, and claims or checks the run id.
  /// \throws ddp::RendezvousError when the store cannot be hosted or
  ///   reached, or belongs to another run id.
  NodeRendezvous(const LaunchPlan& plan, const std::string& secret);
  ~NodeRendezvous();

  /// Joins the next round (the first for a node that arrives at a running
  /// job: the one after the running round) and waits until it closes.
  /// \throws ddp::TimeoutError when fewer than --nnodes MIN nodes join
  ///   within join_timeout; ddp::RendezvousError when the store is lost,
  ///   or when this node waited as a spare node (Note [Spare nodes]) for
  ///   join_timeout and no place opened.
  NodeAssignment next_round();

  /// The host, once the job is over: tells spare nodes waiting for the
  /// round after `last` that it ended, and waits (`patience` at most) until
  /// they have read it.
  void end_job(const NodeAssignment& last, std::chrono::milliseconds patience);

  /// Whether a node waits to join the round after `running`: never for the
  /// static backend, nor when `running` already has --nnodes MAX nodes.
  bool nodes_waiting(const NodeAssignment& running);

  /// How many nodes joined the round after `running` so far (spare nodes,
  /// before the running nodes re-form).
  int nodes_joined_next(const NodeAssignment& running);

  /// The next round closes as soon as `count` nodes have joined: the
  /// nodes of the last round but a lost one, and the spare nodes that were
  /// waiting, which need no last call.
  void expect_nodes(int count) { expected_nodes_ = count; }

  /// After this node lost the store for `why` (Note [A new host]): meets the
  /// other survivors in a successor's store; next_round() then joins the
  /// round after the lost host's last. False when no take-over is possible
  /// (the static backend, fewer than three nodes, or this node was the
  /// host).
  /// \throws ddp::RendezvousError when no standby takes over.
  bool take_over(const std::string& why);

  /// The agents' store.
  c10d::Store& store() { return *store_; }

 private:
  std::string key(int round, const std::string& name) const;
  int close_round(int round);
  void check_majority_returned(int round);
  bool spare_for(int round);
  bool wait_as_spare(int round, int rank);

  const LaunchPlan& plan_;
  c10::intrusive_ptr<c10d::Store> store_;
  std::unique_ptr<HostSuccession> succession_;  // c10d with MAX of 3 or more
  std::string endpoint_;                        // the store's HOST:PORT
  int quorum_of_ = 0;       // the round after a take-over: the node count before it
  int expected_nodes_ = 0;  // expect_nodes()
  bool host_ = false;
  int next_round_ = -1;    // -1: not joined yet
  int member_round_ = -1;  // the last round this node was a member of
  int member_nnodes_ = 0;  // and its node count
  bool said_spare_ = false;
};

}  // namespace ddp::launch

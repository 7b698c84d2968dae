#pragma once

// Internal: ddprun's agent, one per node. It starts the node's workers,
// watches them, and on any failure anywhere stops every worker of the job
// and starts them all again, up to --max-restarts times.
//
// Note [How agents on several nodes agree]
// The agents meet in a store hosted by node 0 (Note [How nodes meet] in
// launch/node_rendezvous.hpp). Every key is under the job's run id. For
// each attempt k (one per rendezvous round):
//   k/nproc/<node>  each node's worker count (ranks are laid out by node);
//   k/port          the workers' MASTER_PORT, a free port chosen by node 0;
//   k/failure       the first failure, set once (compare-and-set), and
//                   whether a restart would repeat it
//                   (comm::store::failure_value);
//   k/done/<node>   a node whose workers all exited 0;
//   k/flight/<node> after a failure, the node's ranks' last collectives
//                   (Note [Reading a stall]);
//   k/left/<node>   an agent that has finished with attempt k;
//   k/heartbeat/<node>  a counter each agent bumps at every store poll
//                   (Note [Agent heartbeats]);
//   k/generation    --recovery memory: the generation the attempt's
//                   workers start in (Note [Recovery in memory] in
//                   ddp/elastic/run.hpp), beside the run's recovery_store.
// An agent polls its workers continuously and the store every monitor
// interval, so a failure on one node stops the job on all of them within a
// few intervals.
//
// Note [Agent heartbeats]
// Every agent bumps k/heartbeat/<node> at each store poll (and while it
// stops its workers), one add() per monitor interval. Node 0, which hosts
// the store and so leaves last, reads the others': a node whose counter has
// not moved for node_timeout (--rdzv-conf node_timeout, by default
// max(5 s, 10 monitor intervals)) is gone. While the attempt runs that is
// a failure (k/failure, "node N stopped its heartbeat ...") unless the
// node's workers were already done: without it a node whose agent died,
// its workers taken with it, would go unnoticed under --recovery memory,
// where the others' workers wait for it rather than fail. At the end node 0
// does not wait out join_timeout for a gone node to count itself out
// (k/left/<node>): it says so and leaves. Node 0 itself needs no watcher:
// its loss is the store's, which every other agent sees at its next store
// call, and with three nodes or more they re-form around a successor (Note
// [A new host] in launch/node_rendezvous.hpp), at the cost of one
// restart.
//
// The job's secret (Note [Store authentication]) guards both stores: the
// agents' (several nodes, --secret-file) and the workers' (rank 0's). On
// one node the agent writes a fresh secret for every job; for several
// nodes only a file every node has can serve, so without --secret-file the
// job runs unauthenticated, as torchrun's does, and ddprun says so.

#include <chrono>
#include <csignal>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "comm/store/worker_protocol.hpp"
#include "ddp/launch/errors.hpp"
#include "launch/attempt_decision.hpp"
#include "launch/launch_options.hpp"
#include "launch/node_rendezvous.hpp"
#include "launch/recovery_store.hpp"

namespace ddp::launch {

class SparePool;
struct WorkerPlacement;

class Agent {
 public:
  /// Creates a private directory (the job's secret on one node, error files
  /// without --log-dir), and a log directory for --redirects or --tee
  /// without --log-dir.
  /// \throws ddp::IoError when a directory cannot be created.
  explicit Agent(LaunchPlan plan);
  ~Agent();

  /// Meets the other nodes (hosting or joining the agents' store, which
  /// --secret-file authenticates), then runs the job to its end; returns
  /// the launcher's exit status: 0 when every worker of the last attempt
  /// succeeded, 1 when restarts ran out, 128 + signal when interrupted.
  /// \throws ddp::LaunchError when a worker cannot be started or no port
  ///   can be found for the workers; ddp::IoError when a worker's log or
  ///   error file cannot be created; ddp::RendezvousError or
  ///   ddp::TimeoutError when the nodes cannot meet or lose their store.
  int run();

  /// Asks a running agent to stop the job (from a signal handler).
  static void request_stop(int signal) noexcept;

 private:
  struct Attempt;
  using Outcome = AttemptOutcome;

  Attempt start_attempt(int round);
  std::pair<int, int> lay_out(int round, int nproc);
  Attempt reseat_attempt(Attempt kept, int round);
  int next_generation(int round);
  std::string recovery_store_file() const;
  void write_recovery_store_file();
  WorkerPlacement placement(const Attempt& attempt, int local_rank, int rank, int generation) const;
  void prepare_files(WorkerPlacement& placement, int attempt) const;
  void start_worker(Attempt& attempt, int local_rank, int rank, int generation);
  // Sets the attempt's failure in the agents' store unless a node set one
  // first; the attempt's failure becomes the one set.
  void record_failure(Attempt& attempt, const comm::store::AttemptFailure& failure);
  bool replace_worker(Attempt& attempt, size_t index, const std::string& failure);
  Outcome monitor(Attempt& attempt);
  // Note [After an attempt] in launch/attempt_decision.hpp: the facts, and
  // the decision carried out; the agent's exit code, or nullopt to go on.
  AttemptFacts attempt_facts(Outcome outcome, Attempt& attempt);
  std::optional<int> carry_out(const AttemptDecision& decision, Attempt& attempt, Outcome outcome);
  void report_stall(const Attempt& attempt);
  void leave(Attempt& attempt);
  void beat(Attempt& attempt);
  std::chrono::milliseconds heartbeat_silence(Attempt& attempt, int node);
  std::string key(int attempt, const std::string& name) const;
  std::string error_file(int attempt, int local_rank) const;

  LaunchPlan plan_;
  std::unique_ptr<NodeRendezvous> rendezvous_;
  NodeAssignment node_;                      // this round's
  std::unique_ptr<RecoveryStore> recovery_;  // --recovery memory
  std::unique_ptr<SparePool> spares_;        // --spares
  std::unique_ptr<Attempt> kept_;            // workers kept through a take-over
  int generation_seen_ = 0;                  // the newest this agent started or saw
  int store_moves_ = 0;                      // recovery stores this agent has had
  int restarts_ = 0;
  std::string private_dir_;  // mode 0700: the secret, and error files when no --log-dir
  static volatile std::sig_atomic_t stop_signal_;
};

}  // namespace ddp::launch

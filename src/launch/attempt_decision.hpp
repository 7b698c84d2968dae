#pragma once

// Internal: what ddprun's agent does once an attempt (one rendezvous
// round's workers) ends, decided from the facts alone, so that each case is
// one row of a table (tests/launch/attempt_decision_test.cpp). Agent::run
// gathers the facts, calls decide_attempt() and carries the decision out.
//
// Note [After an attempt]
// In order of precedence:
//   - a node waits to join and every worker still runs under --recovery
//     memory: re-form keeping the workers (they move at their next commit),
//     no restart counted;
//   - the store's host or another node was lost, every worker still runs
//     under --recovery memory and a restart is left: re-form without it
//     keeping the workers, one restart counted;
//   - success: stop, release the spares, leave the rendezvous, exit 0;
//   - a signal: stop every worker, exit 128 + the signal;
//   - a failure a restart would meet again (a worker's SnapshotError: the
//     disk still full): every worker is stopped and the job ends with 1,
//     restarts left or not (no restart loop);
//   - otherwise every worker is stopped, and then: the host lost with no
//     restart left ends the agent with 1 (no rendezvous is left to leave);
//     a node waiting to join re-forms the job, no restart counted; no
//     restart left ends it with 1; else the job restarts, one restart
//     counted.

#include <string>

namespace ddp::launch {

/// How an attempt's monitoring ended.
enum class AttemptOutcome {
  kSucceeded,    ///< every worker of every node succeeded
  kFailed,       ///< a worker failed, or a node stopped its heartbeat
  kInterrupted,  ///< the agent received a signal
  kReformed,     ///< a node waits to join the job
  kHostLost,     ///< the store's host was lost and another node took over
};

/// What the agent knows when the attempt ended.
struct AttemptFacts {
  AttemptOutcome outcome = AttemptOutcome::kFailed;
  bool memory_recovery = false;  ///< --recovery memory
  bool workers_running = false;  ///< every worker of this node still runs
  bool node_lost = false;        ///< kFailed because node 0 found a node's heartbeat stopped
  int restarts = 0;              ///< restarts used so far
  int max_restarts = 0;          ///< --max-restarts
  int stop_signal = 0;           ///< the signal, for kInterrupted
  bool failure_repeats = false;  ///< kFailed by a failure a restart would meet again
};

/// What the agent does next (Note [After an attempt]).
enum class AttemptAction {
  kKeepWorkersForJoin,      ///< re-form, the workers kept; no restart counted
  kKeepWorkersWithoutLost,  ///< re-form without the lost node, the workers kept; a restart
  kSucceed,                 ///< stop, release the spares, leave; exit 0
  kStopOnSignal,            ///< record the signal, stop, release the spares; exit 128 + signal
  kGiveUpHostLost,          ///< stopped; the host lost and no restart left: exit 1
  kReformStoppingWorkers,   ///< stopped; re-form for the joining node; no restart counted
  kGiveUpRepeats,           ///< stopped; the failure would repeat: release, leave, exit 1
  kGiveUp,                  ///< stopped; no restart left: release, leave, exit 1
  kRestart,                 ///< stopped; start every worker again; a restart
};

/// The action, and what follows from it.
struct AttemptDecision {
  AttemptAction action = AttemptAction::kRestart;
  /// The agent's exit code when the action ends it; -1 when it goes on.
  int exit_code = -1;
  /// Whether the action uses one of --max-restarts.
  bool counts_restart = false;
};

/// The decision for `facts` (Note [After an attempt]); pure.
AttemptDecision decide_attempt(const AttemptFacts& facts);

/// The action's name, as the table test prints it ("restart", ...).
std::string to_string(AttemptAction action);

}  // namespace ddp::launch

// Note [After an attempt] in launch/attempt_decision.hpp, one row per case:
// the facts an attempt ended with, and what ddprun's agent must do next.

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "launch/attempt_decision.hpp"

using ddp::launch::AttemptAction;
using ddp::launch::AttemptDecision;
using ddp::launch::AttemptFacts;
using ddp::launch::AttemptOutcome;
using ddp::launch::decide_attempt;

namespace {

struct DecisionRow {
  std::string name;
  AttemptFacts facts;
  AttemptAction action;
  int exit_code;
  bool counts_restart;
};

// facts(outcome, memory, running, node_lost, restarts, max_restarts, signal)
AttemptFacts facts(AttemptOutcome outcome, bool memory, bool running, bool node_lost, int restarts,
                   int max_restarts, int signal = 0) {
  AttemptFacts f;
  f.outcome = outcome;
  f.memory_recovery = memory;
  f.workers_running = running;
  f.node_lost = node_lost;
  f.restarts = restarts;
  f.max_restarts = max_restarts;
  f.stop_signal = signal;
  return f;
}

// `f`, failed by a failure a restart would meet again.
AttemptFacts repeating(AttemptFacts f) {
  f.failure_repeats = true;
  return f;
}

}  // namespace

TEST(CoreAttemptDecision, EachRowOfTheTable) {
  using A = AttemptAction;
  using O = AttemptOutcome;
  const std::vector<DecisionRow> rows = {
      // A node waits to join.
      {"join, memory, workers running", facts(O::kReformed, true, true, false, 0, 0),
       A::kKeepWorkersForJoin, -1, false},
      {"join, memory, restarts used up: still kept", facts(O::kReformed, true, true, false, 3, 3),
       A::kKeepWorkersForJoin, -1, false},
      {"join, memory, a worker ended", facts(O::kReformed, true, false, false, 0, 3),
       A::kReformStoppingWorkers, -1, false},
      {"join, no memory", facts(O::kReformed, false, true, false, 0, 3), A::kReformStoppingWorkers,
       -1, false},
      {"join, no memory, no restart left", facts(O::kReformed, false, true, false, 3, 3),
       A::kReformStoppingWorkers, -1, false},
      // The store's host lost, another node took over.
      {"host lost, memory, running, restart left", facts(O::kHostLost, true, true, false, 0, 1),
       A::kKeepWorkersWithoutLost, -1, true},
      {"host lost, memory, running, no restart left", facts(O::kHostLost, true, true, false, 1, 1),
       A::kGiveUpHostLost, 1, false},
      {"host lost, memory, a worker ended", facts(O::kHostLost, true, false, false, 0, 1),
       A::kRestart, -1, true},
      {"host lost, no memory, restart left", facts(O::kHostLost, false, true, false, 0, 1),
       A::kRestart, -1, true},
      {"host lost, no memory, no restart left", facts(O::kHostLost, false, true, false, 2, 2),
       A::kGiveUpHostLost, 1, false},
      // Another node lost (node 0 saw its heartbeat stop).
      {"node lost, memory, running, restart left", facts(O::kFailed, true, true, true, 0, 1),
       A::kKeepWorkersWithoutLost, -1, true},
      {"node lost, memory, running, no restart left", facts(O::kFailed, true, true, true, 1, 1),
       A::kGiveUp, 1, false},
      {"node lost, memory, a worker ended", facts(O::kFailed, true, false, true, 0, 1), A::kRestart,
       -1, true},
      // A worker failed.
      {"failed, restart left", facts(O::kFailed, false, false, false, 0, 2), A::kRestart, -1, true},
      {"failed, memory, running, not a lost node", facts(O::kFailed, true, true, false, 0, 2),
       A::kRestart, -1, true},
      {"failed, no restart left", facts(O::kFailed, false, false, false, 2, 2), A::kGiveUp, 1,
       false},
      {"failed, no restarts allowed", facts(O::kFailed, true, true, false, 0, 0), A::kGiveUp, 1,
       false},
      // A failure a restart would meet again (a worker's SnapshotError).
      {"failed, repeats, restarts left", repeating(facts(O::kFailed, false, false, false, 0, 3)),
       A::kGiveUpRepeats, 1, false},
      {"failed, repeats, memory, restarts left",
       repeating(facts(O::kFailed, true, false, false, 1, 3)), A::kGiveUpRepeats, 1, false},
      {"failed, repeats, no restart left", repeating(facts(O::kFailed, false, false, false, 3, 3)),
       A::kGiveUpRepeats, 1, false},
      // Success and signals end the agent whatever the restarts.
      {"succeeded", facts(O::kSucceeded, false, false, false, 0, 0), A::kSucceed, 0, false},
      {"succeeded after restarts, memory", facts(O::kSucceeded, true, false, false, 3, 3),
       A::kSucceed, 0, false},
      {"SIGTERM", facts(O::kInterrupted, false, true, false, 0, 3, 15), A::kStopOnSignal, 143,
       false},
      {"SIGINT, memory, workers running", facts(O::kInterrupted, true, true, false, 0, 3, 2),
       A::kStopOnSignal, 130, false},
  };
  for (const auto& row : rows) {
    const AttemptDecision decision = decide_attempt(row.facts);
    EXPECT_EQ(decision.action, row.action)
        << row.name << ": " << to_string(decision.action) << ", expected " << to_string(row.action);
    EXPECT_EQ(decision.exit_code, row.exit_code) << row.name;
    EXPECT_EQ(decision.counts_restart, row.counts_restart) << row.name;
  }
}

TEST(CoreAttemptDecision, EveryActionHasAName) {
  for (auto action :
       {AttemptAction::kKeepWorkersForJoin, AttemptAction::kKeepWorkersWithoutLost,
        AttemptAction::kSucceed, AttemptAction::kStopOnSignal, AttemptAction::kGiveUpHostLost,
        AttemptAction::kReformStoppingWorkers, AttemptAction::kGiveUp, AttemptAction::kRestart}) {
    EXPECT_NE(to_string(action), "unknown");
  }
}

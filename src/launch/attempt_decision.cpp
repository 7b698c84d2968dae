#include "launch/attempt_decision.hpp"

namespace ddp::launch {

AttemptDecision decide_attempt(const AttemptFacts& facts) {
  using Outcome = AttemptOutcome;
  const bool restart_left = facts.restarts < facts.max_restarts;
  const bool keep = facts.memory_recovery && facts.workers_running;
  if (facts.outcome == Outcome::kReformed && keep) {
    return {AttemptAction::kKeepWorkersForJoin, -1, false};
  }
  if ((facts.outcome == Outcome::kHostLost ||
       (facts.outcome == Outcome::kFailed && facts.node_lost)) &&
      keep && restart_left) {
    return {AttemptAction::kKeepWorkersWithoutLost, -1, true};
  }
  switch (facts.outcome) {
    case Outcome::kSucceeded:
      return {AttemptAction::kSucceed, 0, false};
    case Outcome::kInterrupted:
      return {AttemptAction::kStopOnSignal, 128 + facts.stop_signal, false};
    case Outcome::kHostLost:
      if (!restart_left) return {AttemptAction::kGiveUpHostLost, 1, false};
      break;
    case Outcome::kReformed:
      return {AttemptAction::kReformStoppingWorkers, -1, false};
    case Outcome::kFailed:
      if (facts.failure_repeats) return {AttemptAction::kGiveUpRepeats, 1, false};
      break;
  }
  if (!restart_left) return {AttemptAction::kGiveUp, 1, false};
  return {AttemptAction::kRestart, -1, true};
}

std::string to_string(AttemptAction action) {
  switch (action) {
    case AttemptAction::kKeepWorkersForJoin:
      return "keep workers for a join";
    case AttemptAction::kKeepWorkersWithoutLost:
      return "keep workers without the lost node";
    case AttemptAction::kSucceed:
      return "succeed";
    case AttemptAction::kStopOnSignal:
      return "stop on a signal";
    case AttemptAction::kGiveUpHostLost:
      return "give up, the host lost";
    case AttemptAction::kReformStoppingWorkers:
      return "re-form, stopping the workers";
    case AttemptAction::kGiveUpRepeats:
      return "give up, the failure would repeat";
    case AttemptAction::kGiveUp:
      return "give up";
    case AttemptAction::kRestart:
      return "restart";
  }
  return "unknown";
}

}  // namespace ddp::launch

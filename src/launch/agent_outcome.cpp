// ddprun's agent once an attempt ended: the facts it ended with, and the
// decision (Note [After an attempt] in launch/attempt_decision.hpp) carried
// out.

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "base/str.hpp"
#include "comm/store/store_value.hpp"
#include "ddp/launch/child_process.hpp"
#include "launch/agent.hpp"
#include "launch/agent_attempt.hpp"
#include "launch/say.hpp"
#include "launch/spare_pool.hpp"

namespace ddp::launch {

void Agent::record_failure(Attempt& attempt, const comm::store::AttemptFailure& failure) {
  // The first failure of any node is the job's (compare-and-set).
  attempt.failure = comm::store::parse_failure_value(comm::store::as_text(
      rendezvous_->store().compareSet(key(attempt.number, "failure"), {},
                                      comm::store::as_bytes(comm::store::failure_value(failure)))));
}

AttemptFacts Agent::attempt_facts(Outcome outcome, Attempt& attempt) {
  AttemptFacts facts;
  facts.outcome = outcome;
  facts.memory_recovery = plan_.memory_recovery;
  facts.restarts = restarts_;
  facts.max_restarts = plan_.options.max_restarts;
  facts.stop_signal = stop_signal_;
  facts.failure_repeats = outcome == Outcome::kFailed && attempt.failure.repeats;
  // A node other than the host lost (node 0 saw its heartbeat stop): the
  // others re-form without it in memory too, as after a take-over. The
  // store is asked only after a failure (after a take-over it is gone).
  facts.node_lost = outcome == Outcome::kFailed && plan_.memory_recovery &&
                    rendezvous_->store().check({key(attempt.number, "node_lost")});
  if (facts.node_lost) {
    rendezvous_->expect_nodes(node_.nnodes - 1 + attempt.spare_nodes_waiting);
  }
  facts.workers_running =
      plan_.memory_recovery && std::none_of(attempt.workers.begin(), attempt.workers.end(),
                                            [](Attempt::Worker& w) { return w.process->reap(); });
  return facts;
}

std::optional<int> Agent::carry_out(const AttemptDecision& decision, Attempt& attempt,
                                    Outcome outcome) {
  const auto& o = plan_.options;
  const int round = attempt.number;
  switch (decision.action) {
    case AttemptAction::kKeepWorkersForJoin:
      // A node joins (Note [A node joins in memory] in ddp/elastic/run.hpp):
      // the workers keep training and move to the larger job at a commit.
      say(base::detail::str("a node is waiting to join the job of ", node_.nnodes,
                            " node(s); re-forming it in rendezvous round ", round + 1,
                            ", this node's workers keeping their state (recovery in memory: ",
                            "they move at their next commit; no restart counted)"));
      kept_ = std::make_unique<Attempt>(std::move(attempt));
      return std::nullopt;
    case AttemptAction::kKeepWorkersWithoutLost:
      // Recovery in memory: the workers wait for their new seats (Note [A
      // new host] in launch/node_rendezvous.hpp).
      ++restarts_;
      say(base::detail::str(attempt.failure.text, "; re-forming the job without it, this node's ",
                            "workers keeping their state (recovery in memory, restart ", restarts_,
                            " of ", o.max_restarts, ")"));
      kept_ = std::make_unique<Attempt>(std::move(attempt));
      return std::nullopt;
    default:
      break;
  }
  std::vector<ChildProcess*> processes;
  for (auto& w : attempt.workers) processes.push_back(&*w.process);
  auto pump = [&](ChildProcess& p) {
    try {
      beat(attempt);  // while the workers stop
    } catch (const std::exception&) {
      // The store is lost: what follows says so; stopping goes on.
    }
    for (auto& worker : attempt.workers) {
      if (&*worker.process == &p) {
        p.pump([&](Stream s, std::string_view chunk) { worker.output->feed(s, chunk); });
      }
    }
  };
  auto release_spares = [&] {
    if (spares_) spares_->release(plan_.stop_grace);
  };
  if (decision.action == AttemptAction::kSucceed) {
    stop_all(processes, plan_.stop_grace, pump);
    release_spares();
    leave(attempt);
    return decision.exit_code;
  }
  if (decision.action == AttemptAction::kStopOnSignal) {
    const int signal = decision.exit_code - 128;
    say(base::detail::str("received signal ", signal, "; stopping every worker"));
    record_failure(attempt, {base::detail::str("the launcher on node ", node_.node_rank,
                                               " was interrupted by signal ", signal),
                             false});
    stop_all(processes, plan_.stop_grace, pump);
    release_spares();
    return decision.exit_code;
  }
  stop_all(processes, plan_.stop_grace, pump);
  if (outcome == Outcome::kFailed) report_stall(attempt);
  switch (decision.action) {
    case AttemptAction::kGiveUpHostLost:
      say(base::detail::str("job failed after ", restarts_, " restart(s) (--max-restarts ",
                            o.max_restarts, "): ", attempt.failure.text));
      return decision.exit_code;
    case AttemptAction::kReformStoppingWorkers:
      say(base::detail::str("a node is waiting to join the job of ", node_.nnodes,
                            " node(s); stopping every worker to re-form it (rendezvous round ",
                            round + 1, "; no restart counted)"));
      return std::nullopt;
    case AttemptAction::kGiveUpRepeats:
      release_spares();
      leave(attempt);
      say(base::detail::str("job failed: ", attempt.failure.text,
                            "; not restarting (a snapshot that cannot be written or read fails "
                            "again in a restart; free the disk or fix the file, then start the "
                            "job again: it resumes from its last complete snapshot)"));
      return decision.exit_code;
    case AttemptAction::kGiveUp:
      release_spares();
      leave(attempt);
      say(base::detail::str("job failed after ", restarts_, " restart(s) (--max-restarts ",
                            o.max_restarts, "). First failure: ", attempt.failure.text));
      return decision.exit_code;
    default:  // kRestart
      ++restarts_;
      say(base::detail::str(attempt.failure.text, "; restarting every worker (restart ", restarts_,
                            " of ", o.max_restarts, ")"));
      return std::nullopt;
  }
}

}  // namespace ddp::launch

#include "launch/agent.hpp"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <optional>
#include <sstream>
#include <system_error>
#include <thread>

#include <torch/csrc/distributed/c10d/Store.hpp>

#include "base/str.hpp"
#include "comm/store/job_secret.hpp"
#include "comm/store/store_value.hpp"
#include "comm/store/worker_protocol.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/error_file.hpp"
#include "ddp/comm/flight_recorder.hpp"
#include "ddp/launch/child_process.hpp"
#include "ddp/launch/port_reservation.hpp"
#include "launch/agent_attempt.hpp"
#include "launch/rank_output.hpp"
#include "launch/say.hpp"
#include "launch/spare_pool.hpp"
#include "launch/stall_report.hpp"
#include "launch/worker_environment.hpp"

namespace ddp::launch {
namespace {

using Clock = std::chrono::steady_clock;

// Note [A new host] in launch/node_rendezvous.hpp: while the workers
// run, the agents' store calls are answered within `bound` (and the store's
// grace) or the host is lost; the rendezvous waits get their own timeouts.
class StoreReplyBound {
 public:
  StoreReplyBound(c10d::Store& store, std::chrono::milliseconds bound,
                  std::chrono::milliseconds after)
      : store_(store), after_(after) {
    store_.setTimeout(bound);
  }
  ~StoreReplyBound() { store_.setTimeout(after_); }
  StoreReplyBound(const StoreReplyBound&) = delete;
  StoreReplyBound& operator=(const StoreReplyBound&) = delete;

 private:
  c10d::Store& store_;
  std::chrono::milliseconds after_;
};

}  // namespace

volatile std::sig_atomic_t Agent::stop_signal_ = 0;

void Agent::request_stop(int signal) noexcept { stop_signal_ = signal; }

Agent::Agent(LaunchPlan plan) : plan_(std::move(plan)) {
  const auto& o = plan_.options;
  std::error_code error;
  const std::filesystem::path temp = std::filesystem::temp_directory_path(error);
  if (error) {
    throw IoError("cannot find a temporary directory for the job's secret and error files: " +
                  error.message() + ". Point TMPDIR at a writable directory.");
  }
  std::string pattern = (temp / "ddprun-XXXXXX").string();
  if (!mkdtemp(pattern.data())) {  // mode 0700
    const int code = errno;
    throw IoError("cannot create a private directory in " + temp.string() +
                  " for the job's secret and error files: " + std::strerror(code) +
                  ". Point TMPDIR at a writable directory.");
  }
  private_dir_ = pattern;
  if (plan_.max_nodes == 1 && plan_.secret_file.empty()) {
    plan_.secret_file = store::write_job_secret(private_dir_);
  }
  if (o.log_dir.empty() && (plan_.redirects.any() || plan_.tee.any())) {
    // torchrun's way: the files go to a fresh directory, kept, and named.
    std::string logs = (temp / "ddprun-logs-XXXXXX").string();
    if (!mkdtemp(logs.data())) {
      const int code = errno;
      throw IoError("cannot create a directory in " + temp.string() + " for the workers' logs: " +
                    std::strerror(code) + ". Give a writable --log-dir.");
    }
    plan_.options.log_dir = logs;
    say("--redirects/--tee without --log-dir: the workers' logs go to " + logs);
  }
}

Agent::~Agent() {
  std::error_code ignored;
  std::filesystem::remove_all(private_dir_, ignored);
}

std::string Agent::key(int attempt, const std::string& name) const {
  return comm::store::attempt_key(plan_.options.run_id, attempt, name);
}

// Lays out ranks node by node, from every node's worker count: this node's
// first rank, and the world size.
std::pair<int, int> Agent::lay_out(int number, int nproc) {
  rendezvous_->store().set(key(number, base::detail::str("nproc/", node_.node_rank)),
                           comm::store::as_bytes(std::to_string(nproc)));
  int offset = 0;
  int world_size = 0;
  for (int node = 0; node < node_.nnodes; ++node) {
    const std::string k = key(number, base::detail::str("nproc/", node));
    rendezvous_->store().wait({k}, plan_.rendezvous_timeout);
    const int count = std::stoi(comm::store::as_text(rendezvous_->store().get(k)));
    if (node < node_.node_rank) offset += count;
    world_size += count;
  }
  return {offset, world_size};
}

Agent::Attempt Agent::start_attempt(int number) {
  const auto& o = plan_.options;
  if (kept_) {
    Attempt kept = std::move(*kept_);
    kept_.reset();
    return reseat_attempt(std::move(kept), number);
  }
  Attempt attempt;
  attempt.number = number;
  attempt.heartbeats.resize(static_cast<size_t>(node_.nnodes));
  const auto [offset, world_size] = lay_out(number, plan_.nproc);
  attempt.world_size = world_size;
  // The workers meet at a port of their own, fresh for every attempt, and
  // with --recovery memory in a generation of their own (which a node
  // keeping its workers computes from every node's newest: next_generation).
  if (recovery_) {
    rendezvous_->store().set(key(number, base::detail::str("last_generation/", node_.node_rank)),
                             comm::store::as_bytes(std::to_string(generation_seen_)));
  }
  if (node_.node_rank == 0) {
    const bool given = plan_.max_nodes == 1 && !plan_.c10d && !o.standalone;
    if (!given) attempt.port_reservation.emplace();
    const int port = given ? o.master_port : attempt.port_reservation->port();
    rendezvous_->store().set(key(number, "port"), comm::store::as_bytes(std::to_string(port)));
    if (recovery_) {
      const int generation = number == 0 ? recovery_->current() : recovery_->next();
      rendezvous_->store().set(key(number, "generation"),
                               comm::store::as_bytes(std::to_string(generation)));
    }
  }
  rendezvous_->store().wait({key(number, "port")}, plan_.rendezvous_timeout);
  attempt.port = std::stoi(comm::store::as_text(rendezvous_->store().get(key(number, "port"))));
  int generation = 0;
  if (recovery_) {
    rendezvous_->store().wait({key(number, "generation")}, plan_.rendezvous_timeout);
    generation =
        std::stoi(comm::store::as_text(rendezvous_->store().get(key(number, "generation"))));
    generation_seen_ = generation;
  }
  attempt.workers.resize(static_cast<size_t>(plan_.nproc));
  for (int local = 0; local < plan_.nproc; ++local) {
    start_worker(attempt, local, offset + local, generation);
  }
  if (spares_) spares_->fill(placement(attempt, 0, offset, generation));
  if (recovery_) {  // a node new to a job re-formed in memory: its workers are placed
    rendezvous_->store().set(key(number, base::detail::str("seated/", node_.node_rank)),
                             comm::store::as_bytes("1"));
  }
  return attempt;
}

Agent::Outcome Agent::monitor(Attempt& attempt) {
  // Not on node 0, whose store is served by this very process: paused
  // (SIGSTOP) and continued, its own calls would be past their bound.
  std::optional<StoreReplyBound> bound;
  if (node_.node_rank != 0) {
    bound.emplace(rendezvous_->store(), plan_.node_timeout, plan_.rendezvous_timeout);
  }
  auto last_poll = Clock::now();
  while (true) {
    if (stop_signal_ != 0) return Outcome::kInterrupted;
    std::vector<ChildProcess*> processes;
    for (auto& w : attempt.workers) processes.push_back(&*w.process);
    if (spares_) spares_->add_processes(processes);
    wait_for_output(processes, std::min(plan_.monitor_interval, std::chrono::milliseconds(50)));
    if (spares_) spares_->pump();
    bool all_succeeded = true;
    for (auto& w : attempt.workers) {
      w.process->pump([&](Stream s, std::string_view chunk) { w.output->feed(s, chunk); });
      w.process->reap();
      if (!w.process->exited()) {
        all_succeeded = false;
        continue;
      }
      if (w.process->exit_code() == 0) continue;
      auto recorded = read_error_file(w.error_file);
      const std::string failure =
          base::detail::str("rank ", w.rank, " (node ", node_.node_rank, ", local rank ",
                            w.local_rank, ", pid ", w.process->pid(), ") ended with ",
                            describe_exit(w.process->exit_code(), w.process->term_signal()),
                            recorded ? ": " + recorded->message : " (it recorded no error)");
      // A snapshot that cannot be written or read fails again in a
      // restart or a spare (Note [After an attempt]).
      const bool repeats = w.process->term_signal() == 0 &&
                           w.process->exit_code() == static_cast<int>(ExitCode::kSnapshot);
      if (recovery_ && !repeats &&
          replace_worker(attempt, static_cast<size_t>(&w - attempt.workers.data()), failure)) {
        all_succeeded = false;
        continue;
      }
      record_failure(attempt, {failure, repeats});
      return Outcome::kFailed;
    }
    if (all_succeeded && !attempt.reported_done) {
      attempt.reported_done = true;
      rendezvous_->store().set(key(attempt.number, base::detail::str("done/", node_.node_rank)),
                               comm::store::as_bytes("1"));
      if (node_.nnodes > 1) {
        say(base::detail::str("node ", node_.node_rank,
                              ": every worker succeeded; waiting for the "
                              "other nodes"));
      }
    }
    if (Clock::now() - last_poll < plan_.monitor_interval && !all_succeeded) continue;
    last_poll = Clock::now();
    if (spares_) spares_->poll_store(placement(attempt, 0, 0, 0));
    beat(attempt);
    if (rendezvous_->store().check({key(attempt.number, "failure")})) {
      attempt.failure = comm::store::parse_failure_value(
          comm::store::as_text(rendezvous_->store().get(key(attempt.number, "failure"))));
      return Outcome::kFailed;
    }
    // Node 0 watches the others' heartbeats (Note [Agent heartbeats]).
    for (int node = 1; node_.node_rank == 0 && node < node_.nnodes; ++node) {
      const auto silence = heartbeat_silence(attempt, node);
      if (silence < plan_.node_timeout ||
          rendezvous_->store().check({key(attempt.number, base::detail::str("done/", node))})) {
        continue;
      }
      attempt.heartbeats[static_cast<size_t>(node)].gone = true;
      // Before the failure: no running node has joined the next round yet.
      attempt.spare_nodes_waiting = rendezvous_->nodes_joined_next(node_);
      rendezvous_->store().set(key(attempt.number, "node_lost"),
                               comm::store::as_bytes(std::to_string(node)));
      record_failure(
          attempt, {base::detail::str("node ", node, " stopped its heartbeat ", in_seconds(silence),
                                      " ago (its launcher was lost or is stuck; "
                                      "--rdzv-conf node_timeout is ",
                                      in_seconds(plan_.node_timeout), ")"),
                    false});
      return Outcome::kFailed;
    }
    // After the failure check: a node that failed sets the failure before
    // it joins the next round, so every node counts the same restarts.
    if (rendezvous_->nodes_waiting(node_)) return Outcome::kReformed;
    std::vector<std::string> done;
    for (int node = 0; node < node_.nnodes; ++node) {
      done.push_back(key(attempt.number, base::detail::str("done/", node)));
    }
    if (all_succeeded && rendezvous_->store().check(done)) return Outcome::kSucceeded;
  }
}

// Note [Reading a stall] in launch/stall_report.hpp. Every node publishes
// its ranks' last collectives and reads the others' (a node that does not
// answer in time is left out, its ranks unknown rather than idle).
void Agent::report_stall(const Attempt& attempt) {
  std::vector<RankPosition> positions;
  for (const auto& w : attempt.workers) {
    RankPosition position{w.rank, std::nullopt};
    if (auto record = flight_recorder::read_file(w.flight_recorder_file)) {
      position.last = last_collective(*record);
    }
    positions.push_back(position);
  }
  if (node_.nnodes > 1) {
    std::vector<std::string> others;
    for (int node = 0; node < node_.nnodes; ++node) {
      const bool gone = attempt.heartbeats[static_cast<size_t>(node)].gone;
      if (node != node_.node_rank && !gone) {
        others.push_back(key(attempt.number, base::detail::str("flight/", node)));
      }
    }
    try {
      positions =
          gather_positions(rendezvous_->store(), positions,
                           key(attempt.number, base::detail::str("flight/", node_.node_rank)),
                           others, Clock::now() + plan_.stop_grace + std::chrono::seconds(5));
    } catch (const std::exception& e) {
      say("could not gather the other nodes' flight recorders (" + std::string(e.what()) +
          "); reporting this node's ranks only");
    }
  }
  const std::string report = describe_stall(positions);
  if (!report.empty()) say("flight recorder: " + report);
}

int Agent::run() {
  const auto& o = plan_.options;
  const bool authenticated = !plan_.secret_file.empty();
  const std::string secret = authenticated ? store::read_job_secret(plan_.secret_file) : "";
  rendezvous_ = std::make_unique<NodeRendezvous>(plan_, secret);
  while (true) {
    node_ = rendezvous_->next_round();
    if (node_.job_ended) {
      say(base::detail::str("the job '", o.run_id,
                            "' ended while this node waited as a spare node; nothing to do"));
      return 0;
    }
    if (plan_.memory_recovery && !recovery_) {
      recovery_ = std::make_unique<RecoveryStore>(
          rendezvous_->store(), comm::store::recovery_store_key(o.run_id), node_.node_rank == 0,
          node_.master_addr, secret, plan_.rendezvous_timeout);
      write_recovery_store_file();
      if (plan_.spares > 0) {
        spares_ = std::make_unique<SparePool>(plan_, recovery_->store(), private_dir_);
      }
    }
    if (!authenticated && node_.node_rank == 0 && node_.round == 0) {
      say("warning: no --secret-file, so the rendezvous stores at " + plan_.store_host +
          " admit any machine that reaches them (as torchrun's do). Give every node the same "
          "--secret-file (mode 0600) to admit only this job.");
    }
    const int round = node_.round;
    Attempt attempt = start_attempt(round);
    Outcome outcome = Outcome::kFailed;
    try {
      outcome = monitor(attempt);
    } catch (const RendezvousError& error) {
      // The store's host is lost (Note [A new host]): re-form without it,
      // or end as before when no successor can be found.
      const std::string why = error.what();
      std::string first_line = why.substr(0, why.find('\n'));
      if (!first_line.empty() && first_line.back() == '.') first_line.pop_back();
      if (!rendezvous_->take_over(first_line)) throw;
      outcome = Outcome::kHostLost;
      attempt.failure = {"the node hosting the rendezvous store was lost", false};
      spares_.reset();  // they wait in the lost recovery store
      recovery_.reset();
    }
    const AttemptDecision decision = decide_attempt(attempt_facts(outcome, attempt));
    if (auto exit_code = carry_out(decision, attempt, outcome)) return *exit_code;
  }
}

}  // namespace ddp::launch

#include "launch/agent.hpp"

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <system_error>
#include <thread>

#include "ddp/error_file.hpp"
#include "ddp/errors.hpp"
#include "ddp/tcp_store.hpp"
#include "launch/child_process.hpp"
#include "launch/rank_output.hpp"
#include "store/job_secret.hpp"

namespace ddp::launch {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<uint8_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }
std::string text(const std::vector<uint8_t>& value) { return {value.begin(), value.end()}; }

void say(const std::string& message) { std::cerr << "ddprun: " << message << std::endl; }

}  // namespace

volatile std::sig_atomic_t Agent::stop_signal_ = 0;

struct Agent::Attempt {
  struct Worker {
    int rank = 0;
    int local_rank = 0;
    std::string error_file;
    ChildProcess process;
    RankOutput output;
  };
  int number = 0;
  int world_size = 0;
  std::vector<Worker> workers;
  bool reported_done = false;
  std::string failure;
};

void Agent::requestStop(int signal) noexcept { stop_signal_ = signal; }

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
  if (o.nnodes == 1) {
    if (plan_.secret_file.empty()) plan_.secret_file = store::write_job_secret(private_dir_);
    store_ = c10::make_intrusive<c10d::HashStore>();
    return;
  }
  if (plan_.secret_file.empty() && o.node_rank == 0) {
    say("warning: no --secret-file, so the rendezvous stores at " + o.master_addr +
        " admit any machine that reaches them (as torchrun's do). Give every node the same "
        "--secret-file (mode 0600) to admit only this job.");
  }
  store_ = c10::make_intrusive<TcpStore>(
      TcpStoreOptions()
          .host(o.master_addr)
          .port(o.master_port)
          .is_server(o.node_rank == 0)
          .timeout(plan_.rendezvous_timeout)
          .secret(plan_.secret_file.empty() ? "" : store::read_job_secret(plan_.secret_file)));
}

Agent::~Agent() {
  std::error_code ignored;
  std::filesystem::remove_all(private_dir_, ignored);
}

std::string Agent::key(int attempt, const std::string& name) const {
  return "ddprun/" + plan_.options.run_id + "/" + std::to_string(attempt) + "/" + name;
}

std::string Agent::errorFile(int attempt, int local_rank) const {
  const std::string base = plan_.options.log_dir.empty()
                               ? private_dir_
                               : plan_.options.log_dir + "/" + plan_.options.run_id;
  const std::string dir =
      base + "/attempt_" + std::to_string(attempt) + "/" + std::to_string(local_rank);
  std::error_code error;
  std::filesystem::create_directories(dir, error);
  if (error) {
    throw IoError("cannot create the directory " + dir +
                  " for a worker's error file: " + error.message() + "; check that " +
                  (plan_.options.log_dir.empty() ? std::string("TMPDIR") : "--log-dir") +
                  " is writable.");
  }
  return dir + "/error.json";
}

void Agent::claimRunId() {
  // Node 0 hosts the store and names the job; the others read its name.
  const std::string mine = plan_.options.run_id;
  if (plan_.options.node_rank == 0) store_->set("ddprun/run_id", bytes(mine));
  store_->wait({"ddprun/run_id"}, plan_.rendezvous_timeout);
  const std::string owner = text(store_->get("ddprun/run_id"));
  if (owner != mine) {
    throw RendezvousError("the launcher at " + plan_.options.master_addr + ":" +
                          std::to_string(plan_.options.master_port) + " belongs to run '" + owner +
                          "', not to this run '" + mine +
                          "'. Give every node of one job the "
                          "same --run-id, and separate jobs different ports.");
  }
}

Agent::Attempt Agent::startAttempt(int number) {
  const auto& o = plan_.options;
  Attempt attempt;
  attempt.number = number;
  // Lay out ranks node by node, from every node's worker count.
  store_->set(key(number, "nproc/" + std::to_string(o.node_rank)),
              bytes(std::to_string(plan_.nproc)));
  int offset = 0;
  for (int node = 0; node < o.nnodes; ++node) {
    const std::string k = key(number, "nproc/" + std::to_string(node));
    store_->wait({k}, plan_.rendezvous_timeout);
    const int count = std::stoi(text(store_->get(k)));
    if (node < o.node_rank) offset += count;
    attempt.world_size += count;
  }
  // The workers meet at a port of their own, fresh for every attempt.
  if (o.node_rank == 0) {
    const int port = o.nnodes == 1 && !o.standalone ? o.master_port : findFreePort();
    store_->set(key(number, "port"), bytes(std::to_string(port)));
  }
  store_->wait({key(number, "port")}, plan_.rendezvous_timeout);
  const int port = std::stoi(text(store_->get(key(number, "port"))));

  for (int local = 0; local < plan_.nproc; ++local) {
    WorkerPlacement placement;
    placement.local_rank = local;
    placement.rank = offset + local;
    placement.world_size = attempt.world_size;
    placement.master_addr = o.standalone ? "127.0.0.1" : o.master_addr;
    placement.master_port = port;
    placement.restart_count = number;
    placement.error_file = errorFile(number, local);
    // An earlier job's file would be taken for this attempt's error.
    std::error_code error;
    std::filesystem::remove(placement.error_file, error);
    if (error) {
      throw IoError("cannot remove the old error file " + placement.error_file + ": " +
                    error.message() + "; remove it, or give another --log-dir or --run-id.");
    }
    ChildSpec spec;
    spec.argv = o.command;
    spec.argv[0] = plan_.program_path;
    spec.env = workerEnvironment(plan_, placement);
    const std::string log_dir = o.log_dir.empty()
                                    ? ""
                                    : o.log_dir + "/" + o.run_id + "/attempt_" +
                                          std::to_string(number) + "/" + std::to_string(local);
    attempt.workers.push_back({placement.rank, local, placement.error_file,
                               ChildProcess(spec, /*separate_stderr=*/true),
                               RankOutput(placement.rank, log_dir, o.tee)});
  }
  return attempt;
}

Agent::Outcome Agent::monitor(Attempt& attempt) {
  const auto& o = plan_.options;
  std::vector<ChildProcess*> processes;
  for (auto& w : attempt.workers) processes.push_back(&w.process);
  auto last_poll = Clock::now();
  while (true) {
    if (stop_signal_ != 0) return Outcome::kInterrupted;
    waitForOutput(processes, std::min(plan_.monitor_interval, std::chrono::milliseconds(50)));
    bool all_succeeded = true;
    for (auto& w : attempt.workers) {
      w.process.pump([&](Stream s, std::string_view chunk) { w.output.feed(s, chunk); });
      w.process.reap();
      if (!w.process.exited()) {
        all_succeeded = false;
        continue;
      }
      if (w.process.exitCode() == 0) continue;
      auto recorded = read_error_file(w.error_file);
      const std::string failure = "rank " + std::to_string(w.rank) + " (node " +
                                  std::to_string(o.node_rank) + ", local rank " +
                                  std::to_string(w.local_rank) + ", pid " +
                                  std::to_string(w.process.pid()) + ") ended with " +
                                  describeExit(w.process.exitCode(), w.process.termSignal()) +
                                  (recorded ? ": " + recorded->message : " (it recorded no error)");
      attempt.failure =
          text(store_->compareSet(key(attempt.number, "failure"), {}, bytes(failure)));
      return Outcome::kFailed;
    }
    if (all_succeeded && !attempt.reported_done) {
      attempt.reported_done = true;
      store_->set(key(attempt.number, "done/" + std::to_string(o.node_rank)), bytes("1"));
    }
    if (Clock::now() - last_poll < plan_.monitor_interval && !all_succeeded) continue;
    last_poll = Clock::now();
    if (store_->check({key(attempt.number, "failure")})) {
      attempt.failure = text(store_->get(key(attempt.number, "failure")));
      return Outcome::kFailed;
    }
    std::vector<std::string> done;
    for (int node = 0; node < o.nnodes; ++node) {
      done.push_back(key(attempt.number, "done/" + std::to_string(node)));
    }
    if (all_succeeded && store_->check(done)) return Outcome::kSucceeded;
  }
}

// Node 0 hosts the store: it leaves last, once every agent has read what it
// needs of this attempt (bounded, in case a node died).
void Agent::leave(int attempt) {
  store_->add(key(attempt, "left"), 1);
  if (plan_.options.node_rank != 0 || plan_.options.nnodes == 1) return;
  const auto give_up = Clock::now() + plan_.rendezvous_timeout;
  while (store_->add(key(attempt, "left"), 0) < plan_.options.nnodes && Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
}

int Agent::run() {
  const auto& o = plan_.options;
  claimRunId();
  for (int number = 0;; ++number) {
    Attempt attempt = startAttempt(number);
    const Outcome outcome = monitor(attempt);
    std::vector<ChildProcess*> processes;
    for (auto& w : attempt.workers) processes.push_back(&w.process);
    auto pump = [&](ChildProcess& p) {
      for (auto& worker : attempt.workers) {
        if (&worker.process == &p) {
          p.pump([&](Stream s, std::string_view chunk) { worker.output.feed(s, chunk); });
        }
      }
    };
    if (outcome == Outcome::kSucceeded) {
      stopAll(processes, plan_.stop_grace, pump);
      leave(number);
      return 0;
    }
    if (outcome == Outcome::kInterrupted) {
      say("received signal " + std::to_string(stop_signal_) + "; stopping every worker");
      store_->compareSet(key(number, "failure"), {},
                         bytes("the launcher on node " + std::to_string(o.node_rank) +
                               " was interrupted by signal " + std::to_string(stop_signal_)));
      stopAll(processes, plan_.stop_grace, pump);
      return 128 + stop_signal_;
    }
    stopAll(processes, plan_.stop_grace, pump);
    leave(number);
    if (number >= o.max_restarts) {
      say("job failed after " + std::to_string(number) + " restart(s) (--max-restarts " +
          std::to_string(o.max_restarts) + "). First failure: " + attempt.failure);
      return 1;
    }
    say(attempt.failure + "; restarting every worker (restart " + std::to_string(number + 1) +
        " of " + std::to_string(o.max_restarts) + ")");
  }
}

}  // namespace ddp::launch

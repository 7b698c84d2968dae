// ddprun's agent: starting a node's workers, and starting one again alone
// under --recovery memory (Note [Recovery in memory] in ddp/elastic/run.hpp).

#include <filesystem>
#include <iostream>
#include <system_error>

#include "base/str.hpp"
#include "ddp/base/errors.hpp"
#include "launch/agent.hpp"
#include "launch/agent_attempt.hpp"
#include "launch/say.hpp"
#include "launch/spare_pool.hpp"
#include "launch/worker_environment.hpp"

namespace ddp::launch {

std::string Agent::error_file(int attempt, int local_rank) const {
  const std::string base = plan_.options.log_dir.empty()
                               ? private_dir_
                               : plan_.options.log_dir + "/" + plan_.options.run_id;
  const std::string dir = base::detail::str(base, "/attempt_", attempt, "/", local_rank);
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

WorkerPlacement Agent::placement(const Attempt& attempt, int local_rank, int rank,
                                 int generation) const {
  WorkerPlacement placement;
  placement.local_rank = local_rank;
  placement.rank = rank;
  placement.world_size = attempt.world_size;
  placement.node_rank = node_.node_rank;
  placement.nnodes = node_.nnodes;
  placement.master_addr = node_.master_addr;
  placement.master_port = attempt.port;
  placement.restart_count = restarts_;
  placement.round = attempt.number;
  if (recovery_) {
    placement.recovery_store = recovery_->address();
    placement.recovery_store_file = recovery_store_file();
    placement.generation = generation;
  }
  return placement;
}

// A worker's files, fresh: an earlier job's (or worker's) would be taken
// for this one's.
void Agent::prepare_files(WorkerPlacement& placement, int attempt) const {
  placement.error_file = error_file(attempt, placement.local_rank);
  placement.flight_recorder_file =
      std::filesystem::path(placement.error_file).replace_filename("flight_recorder.bin").string();
  for (const std::string& file : {placement.error_file, placement.flight_recorder_file}) {
    std::error_code error;
    std::filesystem::remove(file, error);
    if (error) {
      throw IoError("cannot remove the old file " + file + ": " + error.message() +
                    "; remove it, or give another --log-dir or --run-id.");
    }
  }
}

// Starts (or starts again) local worker `local_rank` of `attempt`.
void Agent::start_worker(Attempt& attempt, int local_rank, int rank, int generation) {
  const auto& o = plan_.options;
  const int number = attempt.number;
  WorkerPlacement placement = this->placement(attempt, local_rank, rank, generation);
  prepare_files(placement, number);
  ChildSpec spec;
  spec.argv = plan_.argv;
  spec.env = worker_environment(plan_, placement);
  const std::string log_dir =
      o.log_dir.empty()
          ? ""
          : base::detail::str(o.log_dir, "/", o.run_id, "/attempt_", number, "/", local_rank);
  // torchrun's --redirects (to files only) and --tee (files and console).
  unsigned to_files = 0;
  unsigned to_console = 0;
  for (int stream = 0; stream < 2; ++stream) {
    const bool redirect = plan_.redirects.has(local_rank, stream);
    const bool tee = plan_.tee.has(local_rank, stream);
    if (redirect || tee) to_files |= 1u << stream;
    if (!redirect || tee) to_console |= 1u << stream;
  }
  Attempt::Worker& worker = attempt.workers[static_cast<size_t>(local_rank)];
  worker.rank = rank;
  worker.local_rank = local_rank;
  worker.error_file = placement.error_file;
  worker.flight_recorder_file = placement.flight_recorder_file;
  worker.process.emplace(spec, /*separate_stderr=*/true);  // same storage: pointers stay valid
  if (!worker.output) worker.output.emplace(rank, log_dir, to_files, to_console);
}

// --recovery memory: gives the failed worker's rank to a hot spare (Note [A
// spare waits for a seat]), or starts it again alone, in a new generation;
// the others keep their processes and state (Note [Recovery in memory]).
// False when no restart is left.
bool Agent::replace_worker(Attempt& attempt, size_t index, const std::string& failure) {
  if (restarts_ >= plan_.options.max_restarts) return false;
  ++restarts_;
  const int generation = recovery_->next();
  generation_seen_ = generation;
  const std::string restart = base::detail::str("(recovery in memory, restart ", restarts_, " of ",
                                                plan_.options.max_restarts, ")");
  Attempt::Worker& worker = attempt.workers[index];
  if (spares_) {
    WorkerPlacement seat = placement(attempt, worker.local_rank, worker.rank, generation);
    prepare_files(seat, attempt.number);
    if (auto spare = spares_->take(worker_environment(plan_, seat))) {
      say(base::detail::str(failure, "; spare ", spare->id, " (pid ", spare->process.pid(),
                            spare->ready_for_ms
                                ? base::detail::str(", ready for ", *spare->ready_for_ms, " ms")
                                : std::string(", still starting"),
                            ") takes rank ", worker.rank, " in generation ", generation,
                            ", the other workers keep their state ", restart));
      worker.process.emplace(std::move(spare->process));  // same storage: pointers stay valid
      return true;
    }
  }
  say(base::detail::str(failure, "; starting it again alone in generation ", generation,
                        ", the other workers keep their state ", restart));
  start_worker(attempt, worker.local_rank, worker.rank, generation);
  return true;
}

}  // namespace ddp::launch

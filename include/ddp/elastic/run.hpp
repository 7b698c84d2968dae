#pragma once

/// \file run.hpp
/// Training that survives a lost worker without leaving its process:
/// Horovod Elastic's `hvd.elastic.run` for ddprun's `--recovery memory`.
///
/// \code
///   ddp::snapshot::TrainingState training;  // model, optimizer, counters
///   ddp::elastic::State state(training);
///   ddp::elastic::run(state, [&](const std::shared_ptr<ddp::ProcessGroup>& group) {
///     ddp::DistributedDataParallel model(net, group);
///     for (int64_t step = 1; step <= steps; ++step) {
///       train_step(model);
///       if (step % 10 == 0) state.commit();
///     }
///   });
/// \endcode
///
/// Note [Recovery in memory]
/// Under `ddprun --recovery memory` a worker that fails is started again
/// alone, with the same rank; the others keep their processes. ddprun hosts
/// a store that outlives every worker (DDP_RECOVERY_STORE, guarded by the
/// job's secret) and counts generations in it: each replacement starts a
/// new one. run() meets the group of its generation in that store, syncs
/// the state (the replacement receives the survivors' last commit by
/// broadcast, State::sync) and calls the training function. When a
/// collective fails there (a peer died: CollectiveError, TimeoutError,
/// RendezvousError), run() drops the group, waits for the next generation
/// and goes round again; the survivors roll back to their last commit and
/// the job continues from it at the same world size. Anything else (a bug,
/// bad data) ends the worker as usual. Without DDP_RECOVERY_STORE (plain
/// ddprun, torchrun, one process) run() calls the function once with
/// init()'s group, and a failure ends the worker, so the same program runs
/// under every launcher.
/// When the job re-forms without a lost node (its host's included, Note [A
/// new host] in src/launch/node_rendezvous.hpp), the launcher gives each
/// kept worker a seat in the next generation, keyed by the rank it had: the
/// variables of its place in the smaller job, which run() takes as its own
/// before it meets the group; a store that moved is found again through
/// DDP_RECOVERY_STORE_FILE.
///
/// Note [A node joins in memory]
/// A node that joins a running job (ddprun --nnodes MIN:MAX below MAX)
/// re-forms it in memory too: the running workers keep their processes and
/// state, the agents seat them at the larger layout in a new generation,
/// and the new node's workers start in that generation. The running workers
/// learn of it at their next commit: while the training function runs,
/// every State::commit() ends with rank 0 reading the store's newest
/// generation and broadcasting it (one 8-byte broadcast per commit), and
/// when it is newer, commit() throws MembershipChange on every rank alike,
/// with the commit made (Horovod Elastic checks for new hosts at commit
/// the same way). run() catches it, takes the seat and syncs the commit to
/// the new ranks, which resume the epoch where the commit left it, at the
/// larger world size: no step is lost or run again. A job that commits
/// rarely takes the new node late; one that ends before its next commit
/// never takes it, and the new workers, finding that the training ended
/// (rank 0 marks it when the function returns), end with exit 0 inside
/// run(), as a released spare does.
///
/// With a ZeroRedundancyOptimizer or a FullyShardedDataParallel model,
/// sync() cannot hand a rank its shard before the training function has
/// made the optimizer (and model) over the new group: the function sets
/// TrainingState::zero_optimizer (or fully_sharded) and calls
/// State::restore() when commits() > 0 (Note [Sharded state in memory] in
/// ddp/elastic/state.hpp; the toy trainer does both).
///
/// Note [A spare waits for a seat]
/// `ddprun --spares K` also starts K hot spares per node: the same program,
/// started ahead of need, with DDP_SPARE=<id> and no RANK or WORLD_SIZE.
/// A spare runs main() as far as run() (LibTorch loaded, data read, model
/// and State built: the ~0.5 s a replacement would spend before it could
/// train) and waits there, in the recovery store, for a seat. When a worker
/// fails, its agent gives the worker's variables (RANK, WORLD_SIZE,
/// DDP_RECOVERY_GENERATION, ...) to a ready spare instead of starting a
/// process; the spare takes them as its own, also in its environment, and
/// goes on as a replacement would: it meets the new generation and receives
/// the last commit (State::sync). At the job's end the agent releases the
/// spares that were not needed, and each ends its process with exit 0
/// inside run(), without returning: the code after run() is a worker's.
/// Code before run() runs in a spare too, as if it were a job of one
/// process (is_spare() tells; a spare that calls init() is refused, since
/// it has no rank), so side effects there must not assume a rank.

#include <torch/arg.h>

#include <chrono>
#include <functional>
#include <memory>

#include "ddp/comm/init.hpp"
#include "ddp/comm/process_group_fwd.hpp"
#include "ddp/elastic/state.hpp"

namespace ddp::elastic {

/// Options of run().
struct RunOptions {
  /// How each generation's group starts (backend, timeouts); its store and
  /// master address are run()'s under --recovery memory.
  TORCH_ARG(InitOptions, init);
  /// How long a survivor waits for the launcher to start the next
  /// generation before it gives up (TimeoutError), and how long a
  /// generation's ranks wait for each other.
  TORCH_ARG(std::chrono::milliseconds, rejoin_timeout) = std::chrono::minutes(5);
};

/// The training function: called with each generation's group; returns
/// when training is done.
using TrainFunction = std::function<void(const std::shared_ptr<ProcessGroup>& group)>;

/// Runs `train` until it returns, recovering from lost peers in memory
/// under `ddprun --recovery memory` (Note [Recovery in memory]).
/// \throws whatever `train` throws that is not a lost peer or a
///   MembershipChange; TimeoutError
///   when no next generation comes within rejoin_timeout; ConfigError for a
///   malformed DDP_RECOVERY_STORE.
void run(State& state, const TrainFunction& train, const RunOptions& options = {});

/// True in a hot spare of `ddprun --spares` that has no rank yet (Note [A
/// spare waits for a seat]).
bool is_spare();

/// As run(state, train, options), with the environment given explicitly.
void run(State& state, const TrainFunction& train, const RunOptions& options,
         const EnvironmentMap& env);

}  // namespace ddp::elastic

#pragma once

// Internal: a node's hot spares under `ddprun --spares K` (Note [A spare
// waits for a seat] in ddp/elastic/run.hpp). The pool starts them, shows
// their output, sees them ready, hands one over when a worker fails, starts
// another once the promoted one runs, and releases the rest at the end.

#include <chrono>
#include <cstdint>
#include <list>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "ddp/launch/child_process.hpp"
#include "launch/launch_options.hpp"
#include "launch/rank_output.hpp"
#include "launch/worker_environment.hpp"

namespace c10d {
class Store;
}  // namespace c10d

namespace ddp::launch {

/// A spare handed over: its process, now the worker's.
struct PromotedSpare {
  ChildProcess process;
  std::string id;
  /// Milliseconds since it said it was ready; nullopt while it still loads.
  std::optional<int64_t> ready_for_ms;
};

class SparePool {
 public:
  /// Spares of `plan` (plan.spares of them) that wait in the recovery
  /// `store`, their error and flight-recorder files under `dir`. `plan` and
  /// `store` must outlive the pool.
  SparePool(const LaunchPlan& plan, c10d::Store& store, std::string dir);
  ~SparePool();
  SparePool(const SparePool&) = delete;
  SparePool& operator=(const SparePool&) = delete;

  /// Starts spares until plan.spares are alive, each with a worker's
  /// environment from `base` minus its place in the job. None once a spare
  /// ended before it was ready: a program that cannot wait as a spare
  /// would fail again.
  /// \throws ddp::LaunchError when a spare cannot be started.
  void fill(const WorkerPlacement& base);

  /// Adds the spares' processes to `processes` (to wait for output).
  void add_processes(std::vector<ChildProcess*>& processes);

  /// Shows the spares' output and reaps those that ended (says so once).
  void pump();

  /// Reads the store: spares that became ready, and whether the promoted
  /// spare runs (then, or 10 s after its promotion, fill() starts another).
  void poll_store(const WorkerPlacement& base);

  /// Hands the oldest ready spare (else one still loading) the worker
  /// environment `seat`; nullopt when the pool is empty.
  std::optional<PromotedSpare> take(const std::map<std::string, std::string>& seat);

  /// Releases every spare (it exits 0 by itself) and stops those still
  /// running after `grace`; names a spare that fails meanwhile. Their exit
  /// status is not the job's.
  void release(std::chrono::milliseconds grace);

 private:
  struct Spare;
  using Clock = std::chrono::steady_clock;

  void start_one(const WorkerPlacement& base);

  const LaunchPlan& plan_;
  c10d::Store& store_;
  std::string dir_;
  std::list<Spare> spares_;
  bool stopped_refilling_ = false;
  bool released_ = false;                // the job ended: a spare's exit 0 is expected
  std::optional<std::string> promoted_;  // waiting for its `running`
  Clock::time_point promoted_at_;
};

}  // namespace ddp::launch

#pragma once

// The examples' snapshot policy: a snapshot every N steps and/or every N
// epochs, and one when a run stops early at --max-steps, so that the next
// run (or ddprun's restart) continues where this one left off.

#include <cstdint>
#include <memory>
#include <string>

#include "common/cli.hpp"
#include "ddp/comm/process_group_fwd.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"

namespace ddp::examples {

/// Saves and resumes a TrainingState as the common flags ask; does nothing
/// without --snapshot-dir.
class PeriodicSnapshots {
 public:
  PeriodicSnapshots(std::shared_ptr<ProcessGroup> group, const CommonOptions& o)
      : every_steps_(o.save_every_steps), every_epochs_(o.save_every_epochs) {
    if (!o.snapshot_dir.empty()) {
      manager_ = std::make_unique<snapshot::SnapshotManager>(
          snapshot::SnapshotOptions(o.snapshot_dir), std::move(group));
    }
  }

  /// Loads the newest valid snapshot into `state`; false on a fresh start.
  bool resume(snapshot::TrainingState& state) { return manager_ && manager_->resume(state); }

  /// Call after every step. `state` holds where training would continue
  /// (epoch, step_in_epoch, counters["global_step"]); `epoch_done` says the
  /// step ended an epoch, `stopping` that the run ends here (--max-steps).
  void after_step(const snapshot::TrainingState& state, bool epoch_done, bool stopping) {
    if (!manager_) return;
    const int64_t global_step = state.counters.at("global_step");
    const bool by_steps = every_steps_ > 0 && global_step % every_steps_ == 0;
    const bool by_epochs = epoch_done && every_epochs_ > 0 && state.epoch % every_epochs_ == 0;
    if (by_steps || by_epochs || stopping) {
      if (global_step != last_saved_) manager_->save(state);
      last_saved_ = global_step;
    }
  }

 private:
  std::unique_ptr<snapshot::SnapshotManager> manager_;
  int64_t every_steps_, every_epochs_;
  int64_t last_saved_ = -1;
};

}  // namespace ddp::examples

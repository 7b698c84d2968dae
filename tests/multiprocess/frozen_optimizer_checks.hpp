#pragma once

// An optimizer over the trainable parameters only (issue 71, point 2; Note
// [Pieces outside the optimizer] in ddp/parallel/sharded_state.hpp), run by
// ddp_test_worker ("frozen-optimizer") on fsdp_snapshot_model.hpp's model
// with its first Linear frozen and AdamW (two groups) over the rest, as
// PyTorch's fine-tuning recipes make it:
//   "save"          2 ranks train 4 steps, each way: FSDP (a unit per
//                   entry) saves a snapshot (DIR/fsdp), a distributed
//                   checkpoint (DIR/dcp) and a consolidated export
//                   (DIR/consolidated.pt, for dcp_peer.py); FSDP with an
//                   optimizer over every parameter a snapshot
//                   (DIR/fsdp-every); ZeRO-2 a snapshot (DIR/zero) and a
//                   checkpoint (DIR/dcp-zero); DDP with a plain AdamW a
//                   snapshot (DIR/ddp). Rank 0 writes the next 4 batches
//                   (DIR/batches.pt) and one process's 8 steps
//                   (DIR/ddp-final-1.pt, DIR/ddp-zero-final.pt: the same).
//   "resume"        1, 2 or 3 ranks resume each, train 4 more steps and
//                   compare with one process's 8.
//   "load-pytorch"  1, 2 or 3 ranks load DIR/pt-plain and DIR/pt-fsdp1,
//                   which PyTorch 2.6 wrote with the same model frozen
//                   (dcp_peer.py save DIR frozen), and train the 2 steps
//                   of DIR/pt-<variant>-ref.pt.
// Each check is reported by name; frozen_optimizer_check_names() lists them.

#include <memory>
#include <set>
#include <string>

#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::testing {

/// Runs `phase` on `directory`; prints each check and returns how many failed.
int check_frozen_optimizer(const std::shared_ptr<ProcessGroup>& group, const std::string& phase,
                           const std::string& directory);

namespace frozen_optimizer_check {
/// "save", rank 0.
inline const std::string kCheckpointHoldsTheFrozenWeights =
    "the distributed checkpoint holds the frozen weights (model.0.weight, every element) and no "
    "optimizer state or param group entry for them";
/// "resume".
inline const std::string kFsdpSnapshot =
    "FSDP resumed from its snapshot: the frozen weights bit for bit as built, 4 more steps match "
    "one process's 8 (1e-5)";
inline const std::string kFsdpCheckpoint = "FSDP loaded from its distributed checkpoint: the same";
inline const std::string kFsdpSnapshotIntoEveryParameter =
    "an optimizer over every parameter resumes the trainable-only snapshot (the frozen ones "
    "without state) and trains on as one process";
inline const std::string kFsdpEverySnapshotIntoTrainable =
    "a snapshot of an optimizer over every parameter resumes into one over the trainable only "
    "and trains on as one process";
inline const std::string kZeroSnapshot =
    "ZeRO-2 over the trainable parameters resumed from its snapshot: the frozen weights bit for "
    "bit, 4 more steps match one process's 8 (1e-5)";
inline const std::string kZeroCheckpoint =
    "ZeRO-2 over the trainable parameters loaded from its distributed checkpoint: the same";
inline const std::string kDdpSnapshot =
    "DDP with a plain AdamW over the trainable parameters resumed from its snapshot: the same";
inline const std::string kEveryParameterRefused =
    "an optimizer holding the frozen weights cannot take the checkpoint's optimizer: "
    "SnapshotError naming 0.weight and saying to leave it out";
/// "resume", rank 0.
inline const std::string kConsolidatedContinues =
    "the consolidated export, restored into a plain model and AdamW over the trainable "
    "parameters, trains 4 steps to one process's 8 (1e-5)";
/// "load-pytorch".
inline const std::string kPyTorchPlain =
    "PyTorch's checkpoint of a plain model, frozen layer outside the optimizer, loads bit for "
    "bit and 2 more steps match PyTorch's (1e-5)";
inline const std::string kPyTorchFsdp1 =
    "PyTorch FSDP1's checkpoint, frozen layer outside the optimizer, loads bit for bit and 2 "
    "more steps match PyTorch's (1e-5)";
}  // namespace frozen_optimizer_check

/// The names check_frozen_optimizer() reports on `rank` in `phase`.
inline std::set<std::string> frozen_optimizer_check_names(const std::string& phase, int rank) {
  using namespace frozen_optimizer_check;  // NOLINT(google-build-using-namespace)
  if (phase == "save")
    return rank == 0 ? std::set<std::string>{kCheckpointHoldsTheFrozenWeights}
                     : std::set<std::string>{};
  if (phase == "load-pytorch") return {kPyTorchPlain, kPyTorchFsdp1};
  std::set<std::string> names{kFsdpSnapshot,
                              kFsdpCheckpoint,
                              kFsdpSnapshotIntoEveryParameter,
                              kFsdpEverySnapshotIntoTrainable,
                              kZeroSnapshot,
                              kZeroCheckpoint,
                              kDdpSnapshot,
                              kEveryParameterRefused};
  if (rank == 0) names.insert(kConsolidatedContinues);
  return names;
}

}  // namespace ddp::testing

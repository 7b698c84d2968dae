#pragma once

// FullyShardedDataParallel in PyTorch's Distributed Checkpoint format, run
// by ddp_test_worker ("fsdp-dcp"), on the model and AdamW of
// fsdp_snapshot_model.hpp:
//   "save"          2 ranks train 4 steps, a unit per Sequential entry, and
//                   save_distributed_checkpoint() into DIR/dcp; rank 0
//                   writes the full parameters and the next 4 batches
//                   (DIR/batches.pt, for dcp_peer.py);
//   "save-hybrid"   the same on 2 nodes of 2 ranks, sharded within each
//                   node and replicated across them: the first row writes
//                   the pieces;
//   "resume"        1, 2 or 3 ranks, the model one unit, load it and train
//                   4 more steps; rank 0 writes DIR/ddp-final-<world>.pt;
//   "save-zero"     2 ranks, ZeroRedundancyOptimizer (stage 2, AdamW in one
//                   group), save DIR/dcp-zero after 4 steps, then 4 more
//                   (DIR/ddp-zero-final.pt);
//   "load-pytorch"  1, 2 or 3 ranks load DIR/pt-plain and DIR/pt-fsdp1,
//                   which PyTorch's dcp.save wrote (dcp_peer.py save), and
//                   train the 2 steps of DIR/pt-<variant>-ref.pt.
// Each check is reported by name; fsdp_dcp_check_names() lists them.

#include <memory>
#include <set>
#include <string>

#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::testing {

/// Runs `phase` on `directory`; prints each check and returns how many failed.
int check_fsdp_dcp(const std::shared_ptr<ProcessGroup>& group, const std::string& phase,
                   const std::string& directory);

namespace fsdp_dcp_check {
/// "save", rank 0.
inline const std::string kFilesWritten =
    "the checkpoint is .metadata and one .distcp file per rank (rank 0 a second, the param "
    "groups), its metadata naming each parameter's chunks (each element in one), the optimizer "
    "state and the groups; on a mesh the second row's files empty";
/// "save-zero", rank 0.
inline const std::string kZeroSaved =
    "ZeRO's checkpoint names each parameter, its optimizer state and the param group";
/// "resume".
inline const std::string kResumed = "epoch 1 and step 4 come back";
inline const std::string kSameValues =
    "the full parameters after loading equal those saved, bit for bit";
inline const std::string kBuffer = "the module's buffer comes back";
inline const std::string kMatchesOneProcess =
    "4 more steps, loaded into one unit, match one process's 8 steps (1e-5)";
/// "resume", rank 0.
inline const std::string kConsolidatedContinues =
    "save_consolidated with the FullyShardedState holds the optimizer in full: a plain model and "
    "AdamW restored from it train 4 steps to one process's 8 (1e-5)";
inline const std::string kContinuesExactly =
    "at the saving world size, 4 more steps equal 8 uninterrupted steps bit for bit";
inline const std::string kOtherShapeRefused =
    "a model whose parameter has another shape is refused: SnapshotError naming it and both "
    "shapes";
inline const std::string kOtherOptimizerRefused =
    "an SGD job cannot load AdamW's state: SnapshotError naming the option missing and the "
    "optimizer the file holds";
inline const std::string kMixedGroupsRefused =
    "an optimizer whose one group holds parameters of the checkpoint's two is refused: "
    "SnapshotError naming the parameter and both groups";
inline const std::string kNoCheckpointRefused =
    "a directory without .metadata is refused: SnapshotError saying so";
/// "load-pytorch".
inline const std::string kPyTorchPlain =
    "PyTorch's checkpoint of a plain model (2 ranks) loads bit for bit, and 2 more steps match "
    "PyTorch's (1e-5)";
inline const std::string kPyTorchFsdp1 =
    "PyTorch FSDP1's checkpoint (2 ranks, a unit per Linear) loads bit for bit, and 2 more steps "
    "match PyTorch's (1e-5)";
}  // namespace fsdp_dcp_check

/// The names check_fsdp_dcp() reports on `rank` of `world` in `phase`.
inline std::set<std::string> fsdp_dcp_check_names(const std::string& phase, int rank, int world) {
  using namespace fsdp_dcp_check;  // NOLINT(google-build-using-namespace)
  if (phase == "save" || phase == "save-hybrid")
    return rank == 0 ? std::set<std::string>{kFilesWritten} : std::set<std::string>{};
  if (phase == "load-pytorch") return {kPyTorchPlain, kPyTorchFsdp1};
  if (phase == "save-zero") {
    return rank == 0 ? std::set<std::string>{kZeroSaved} : std::set<std::string>{};
  }
  std::set<std::string> names{kResumed,
                              kSameValues,
                              kBuffer,
                              kMatchesOneProcess,
                              kOtherShapeRefused,
                              kOtherOptimizerRefused,
                              kNoCheckpointRefused,
                              kMixedGroupsRefused};
  if (world == 2) names.insert(kContinuesExactly);
  if (rank == 0) names.insert(kConsolidatedContinues);
  return names;
}

}  // namespace ddp::testing

#pragma once

/// \file distributed_checkpoint.hpp
/// Sharded training state in PyTorch's Distributed Checkpoint format (DCP,
/// torch.distributed.checkpoint): saved by every rank of an FSDP or ZeRO
/// job, loaded at any world size, by ddp or by Python.
///
/// \code
///   ddp::FullyShardedDataParallel model(net, group);
///   torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
///   ddp::FullyShardedState sharded(model, optimizer);
///   ddp::snapshot::TrainingState state;
///   state.model = model->module().get();  // its buffers
///   state.fully_sharded = &sharded;
///   ddp::snapshot::save_distributed_checkpoint("ckpt/step-1000", state);  // every rank
///   // Python, at any world size, into a plain model:
///   //   msd, osd = get_state_dict(model, optimizer)
///   //   dcp.load({"model": msd, "optim": osd}, checkpoint_id="ckpt/step-1000")
///   //   set_state_dict(model, optimizer, model_state_dict=msd, optim_state_dict=osd)
///   ddp::snapshot::load_distributed_checkpoint("ckpt/step-1000", state);  // or at 3 ranks
/// \endcode
///
/// The layout is get_state_dict()'s (Note [A training state in DCP] in
/// src/snapshot/dcp_layout.hpp), so a checkpoint PyTorch saved from that
/// dict (FSDP1's or a plain model's, from any number of ranks) loads into
/// ddp, and ddp's into PyTorch. The file format's subset is Note [The DCP
/// subset ddp speaks] (ddp/formats/dcp.hpp). Each rank writes only its own
/// pieces and reads only the chunks that overlap them.

#include <string>

#include "ddp/snapshot/snapshot_manager.hpp"

namespace ddp::snapshot {

/// Where the model and the optimizer lie in the checkpoint's dict.
struct DistributedCheckpointOptions {
  /// The model's key: "model" for dcp.save({"model": msd, "optim": osd}),
  /// "app.model" for the DCP tutorial's {"app": AppState}.
  TORCH_ARG(std::string, model_key) = "model";
  /// The optimizer's key; empty to save or load the model alone.
  TORCH_ARG(std::string, optimizer_key) = "optim";
};

/// Saves `state` into `directory` as DCP. `state` has fully_sharded (and
/// `model` for the buffers) or zero_optimizer and `model`; its epoch and
/// step_in_epoch are saved as `epoch` and `step_in_epoch`. A collective
/// over the sharded state's group: each rank writes __<rank>_0.distcp,
/// rank 0 the .metadata last (a checkpoint without it is not one).
/// \throws SnapshotError on every rank when any rank could not write, or
///   for a state without a sharded part or with an optimizer snapshots do
///   not support.
void save_distributed_checkpoint(const std::string& directory, const TrainingState& state,
                                 const DistributedCheckpointOptions& options = {});

/// Loads the checkpoint in `directory` into `state` (as saved above, or by
/// torch.distributed.checkpoint.save from get_state_dict()'s dicts, at any
/// world size). Each rank reads the chunks overlapping its pieces.
/// \throws SnapshotError naming the first problem: no checkpoint, a
///   parameter or buffer missing or of another shape, optimizer state of
///   another type or keyed by index (save with get_state_dict()), a
///   parameter of a group missing from the checkpoint's groups, a damaged
///   file (FormatError's message).
void load_distributed_checkpoint(const std::string& directory, TrainingState& state,
                                 const DistributedCheckpointOptions& options = {});

}  // namespace ddp::snapshot

#pragma once

/// \file consolidated_export.hpp
/// A FullyShardedDataParallel model's full (consolidated) parameters and
/// buffers in one snapshot file, for export and for jobs that hold the whole
/// model: evaluation in one process, DDP, another world size.
///
/// \code
///   ddp::FullyShardedDataParallel model(net, group);
///   // ... train ...
///   ddp::snapshot::save_consolidated(model, "model-full.ddpsnap");  // on every rank
///   // Elsewhere, one process with the same (unwrapped) architecture:
///   ddp::snapshot::TrainingState state;
///   state.model = net.ptr().get();
///   ddp::snapshot::restore_training_state(
///       ddp::snapshot::read_snapshot_file("model-full.ddpsnap"), state);
/// \endcode
///
/// Note [A consolidated export streams]
/// The units are gathered one at a time (for_each_full_parameter()), and
/// rank 0 appends each parameter to the file as it arrives, so no rank ever
/// holds more than one unit's full parameters beyond its shards, and rank 0
/// no more than that plus the writer's buffer: a model that does not fit
/// one device still exports. The file is a snapshot (Note [What a snapshot
/// file is] in ddp/snapshot/snapshot_manager.hpp) with model/param/<name>
/// and model/buffer/<name> records, written atomically. Given the model's
/// FullyShardedState, it also holds the optimizer's state in full, as
/// PyTorch's FSDP.full_optim_state_dict() does, gathered one parameter at a
/// time: restored into a plain optimizer, or exported for PyTorch
/// (export_checkpoint), the job continues where it stopped.

#include <string>

#include "ddp/parallel/fully_sharded_data_parallel.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"

namespace ddp::snapshot {

/// Writes `model`'s full parameters and its buffers to `path` (rank 0), with
/// `state`'s epoch, step, counters, metadata and extra tensors, and, where
/// `state.fully_sharded` is the model's FullyShardedState, its optimizer's
/// state in full (its model, optimizer and zero_optimizer must be null;
/// its generators are not saved). A collective over the model's group;
/// returns `path` on every rank.
/// \throws SnapshotError on every rank when rank 0 could not write the file,
///   or for a `state` with a model or an optimizer, or another model's
///   FullyShardedState.
std::string save_consolidated(FullyShardedDataParallel& model, const std::string& path,
                              const TrainingState& state = {});

}  // namespace ddp::snapshot

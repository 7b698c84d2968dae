#pragma once

/// \file pytorch_checkpoint.hpp
/// Checkpoints that cross the language line: a training state (or a
/// snapshot file) written as Python's torch.save writes a checkpoint, or as
/// safetensors, and what PyTorch's tutorials save loaded back into a LibTorch
/// model and optimizer.
///
/// \code
///   ddp::snapshot::TrainingState state;
///   state.model = net.ptr().get();
///   state.optimizer = &optimizer;
///   ddp::snapshot::export_checkpoint(state, "model.pt");  // torch.load opens it
///   // ... and a checkpoint PyTorch saved, back into the same objects:
///   ddp::snapshot::ImportReport report = ddp::snapshot::import_checkpoint("model.pt", state);
/// \endcode
///
/// Note [A checkpoint for PyTorch]
/// export_checkpoint() writes the dict a Python training script saves:
///   {"model": state_dict, "optimizer": optimizer.state_dict(),
///    "epoch": int, "step_in_epoch": int, "samples_in_epoch": int,
///    "counters": {str: int}, "metadata": {str: str}, "extra": {str: Tensor}}
/// ("optimizer", "counters", "metadata" and "extra" only where the state has
/// them). The model's keys are the state_dict() keys the same model defined
/// in Python has, in the order it lists them (LibTorch names parameters,
/// buffers and submodules as torch.nn does), so `model.load_state_dict(
/// ckpt["model"])` works unchanged. The optimizer's state is in PyTorch's
/// layout: "state" maps a parameter's index (counted across the groups in
/// order) to its tensors, with "step" a 0-dim float tensor as PyTorch keeps
/// it, and "param_groups" lists each group's options under PyTorch's names
/// (lr, momentum, betas, ...) with its "params" indices; PyTorch fills the
/// options LibTorch lacks (maximize, foreach, ...) with its defaults on
/// load. The file is the zip format of torch.save with pickle protocol 2
/// and only the globals torch.load's weights_only mode allows, so PyTorch
/// 1.13 and 2.x load it with their defaults. A learning-rate scheduler is
/// not exported: its rates are in the optimizer's groups.
///
/// Note [What a PyTorch checkpoint may hold]
/// import_checkpoint() reads a torch.save file of PyTorch 1.6 or later (or
/// a safetensors file) and finds the model's state_dict in it as PyTorch's
/// tutorials save it: the file itself (`torch.save(model.state_dict())`), or
/// under "model", "MODEL_STATE" (the torchrun tutorial), "model_state_dict",
/// "state_dict" or "model_state"; the optimizer's under "optimizer",
/// "OPTIMIZER_STATE", "optimizer_state_dict" or "optim"; the epoch under
/// "epoch" or "EPOCHS_RUN". When every key starts with "module." (the
/// state_dict() of a model wrapped in DistributedDataParallel) and the model
/// has no submodule named "module", the prefix is dropped. Names are matched
/// exactly; what does not match is a StateDictMismatchError listing every
/// missing and unexpected key and every shape that differs. The epoch may
/// also be a tensor of one integer. Other entries (a script's `args`, an
/// argparse.Namespace: objects of classes ddp never constructs or calls)
/// are skipped and named in a warning and in ImportReport::skipped. Nothing
/// live changes unless all of it fits. A file is read as
/// ddp/formats/torch_file.hpp and ddp/formats/safetensors_file.hpp read it:
/// a hostile one is a SnapshotError, never a crash.

#include <torch/arg.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "ddp/snapshot/errors.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"

namespace ddp::snapshot {

/// The formats export_checkpoint() writes.
enum class CheckpointFormat {
  kTorch,        ///< torch.save's (Note [A checkpoint for PyTorch]).
  kSafetensors,  ///< The model's state_dict only, as safetensors.
};

/// "torch" or "safetensors" (ConfigError for anything else).
CheckpointFormat parse_checkpoint_format(const std::string& name);

/// A module's parameters and buffers under the names, and in the order,
/// that PyTorch's Module.state_dict() gives the same model in Python.
std::vector<std::pair<std::string, at::Tensor>> state_dict(const torch::nn::Module& module);

/// Writes `state`'s model, optimizer, epoch, counters, metadata and extra
/// tensors to `path` (Note [A checkpoint for PyTorch]); kSafetensors writes
/// the model's state_dict alone, with the epoch in its metadata. Atomic.
/// \throws SnapshotError naming the path when it cannot be written, for an
///   unsupported optimizer, or for a sharded state (zero_optimizer,
///   fully_sharded: save_consolidated() first, then export that file).
void export_checkpoint(const TrainingState& state, const std::string& path,
                       CheckpointFormat format = CheckpointFormat::kTorch);

/// The same from a snapshot file (read_snapshot_file()); what ddp-export
/// runs. \throws SnapshotError for a sharded snapshot's main file.
void export_checkpoint(const SnapshotFile& file, const std::string& path,
                       CheckpointFormat format = CheckpointFormat::kTorch);

/// Options of import_checkpoint().
struct ImportOptions {
  /// Whether keys that are missing or unexpected are an error (as
  /// load_state_dict's strict). Either way a shape that differs is one.
  TORCH_ARG(bool, strict) = true;
};

/// What import_checkpoint() found and loaded.
struct ImportReport {
  /// Where the model's state_dict was: "file" (the whole file is one),
  /// or the key ("model", "MODEL_STATE", ...).
  std::string model_key;
  /// Whether every key had DistributedDataParallel's "module." prefix,
  /// which was dropped.
  bool dropped_module_prefix = false;
  /// Parameters and buffers loaded.
  size_t tensors_loaded = 0;
  /// The optimizer's key, or "" when none was loaded.
  std::string optimizer_key;
  /// With strict(false): the model's keys the file lacks, and the file's
  /// keys the model lacks (after dropping the prefix).
  std::vector<std::string> missing, unexpected;
  /// The file's top-level entries that are neither the model, the
  /// optimizer nor the training position (a training script's `args`, a
  /// scheduler, a second model), skipped and named in a warning on stderr.
  std::vector<std::string> skipped;
};

/// Loads a checkpoint PyTorch (or export_checkpoint()) wrote into `state`:
/// its model (required), its optimizer where both have one, and its epoch,
/// step_in_epoch, samples_in_epoch, counters, metadata and extra tensors
/// where the file has them (Note [What a PyTorch checkpoint may hold]).
/// \throws StateDictMismatchError when the model's names or shapes differ;
///   SnapshotError for a file that cannot be read, one with no state_dict,
///   or an optimizer state that does not fit `state.optimizer` (naming the
///   first difference). Nothing in `state` changes when it throws.
ImportReport import_checkpoint(const std::string& path, TrainingState& state,
                               const ImportOptions& options = {});

}  // namespace ddp::snapshot

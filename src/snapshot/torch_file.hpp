#pragma once

// Internal: files in the format of Python's torch.save (a zip archive of a
// pickle and raw storages, Note [The pickle subset ddp speaks]), written and
// read without Python and without TorchScript's unpickler.
//
// Note [Why not torch::pickle_save and torch::pickle_load]
// LibTorch's pickle_save tags every dict and list with a call of
// torch.jit._pickle.restore_type_tag, which PyTorch 2.6's torch.load
// (weights_only by default) refuses; its pickle_load cannot read the
// OrderedDict with `_metadata` that every state_dict() is (pytorch#47917).
// ddp therefore pickles and unpickles the subset itself and lets LibTorch's
// PyTorchStreamWriter/Reader handle the zip container, which is the same
// code torch.save and torch.load run in Python.

#include <string>

#include "snapshot/pickle_protocol.hpp"

namespace ddp::snapshot::detail {

/// Writes `root` as torch.save(root, path) would, atomically (a temporary
/// file in the same directory, fsynced, then renamed). Tensors are written
/// as contiguous CPU copies with requires_grad False.
/// \throws SnapshotError naming the path when it cannot be written, or a
///   value ddp cannot pickle.
void write_torch_file(const std::string& path, const PyValue& root);

/// Reads a file torch.save wrote (the zip format of PyTorch 1.6 and later).
/// Tensors come back on the CPU.
/// \throws SnapshotError naming the path and the problem: no such file, not
///   a zip archive (with a hint for the legacy format), a global other than
///   those of Note [The pickle subset ddp speaks], a malformed pickle.
PyRef read_torch_file(const std::string& path);

}  // namespace ddp::snapshot::detail

#pragma once

/// \file torch_file.hpp
/// Files in the format of Python's torch.save (a zip archive of a pickle and
/// raw storages, Note [The pickle subset ddp speaks] in
/// src/formats/pickle_protocol.hpp), written and read without Python and
/// without TorchScript's unpickler: torch.load(path, weights_only=True) for
/// C++.
///
/// Note [Why not torch::pickle_save and torch::pickle_load]
/// LibTorch's pickle_save tags every dict and list with a call of
/// torch.jit._pickle.restore_type_tag, which PyTorch 2.6's torch.load
/// (weights_only by default) refuses; its pickle_load cannot read the
/// OrderedDict with `_metadata` that every state_dict() is (pytorch#47917).
/// ddp therefore pickles and unpickles the subset itself and lets LibTorch's
/// PyTorchStreamWriter/Reader handle the zip container, which is the same
/// code torch.save and torch.load run in Python.
///
/// Note [A hostile file is an error]
/// Checkpoints come from anywhere, so a file is checked before it is
/// trusted, and every failure is a FormatError naming the file, the
/// position and what was expected:
/// - the zip's central directory is read first: each record stored
///   (uncompressed, as torch.save writes it) and inside the file, so no
///   record can claim more bytes than the file has;
/// - the pickle is bounded: nesting at most kMaxPickleDepth containers, at
///   most one value and one memo entry per byte of the pickle, and a tree
///   with a cycle (a list that holds itself) refused; values are freed
///   without recursion (Note [A value tree freed without recursion]);
/// - a storage's size is compared with its record before anything is
///   allocated, a tensor's sizes, strides and offset are checked against
///   its storage without overflow, and a storage class must be one of
///   torch's.

#include <cstdint>
#include <string>

#include "ddp/formats/py_value.hpp"

namespace ddp::formats {

/// Containers nested deeper than this are refused. A checkpoint nests a few
/// levels (dict, state, per-parameter dict, list); Python's own unpickler
/// reads 200,000 but every consumer of such a tree recurses.
inline constexpr int kMaxPickleDepth = 1000;

/// Writes `root` as torch.save(root, path) would, atomically (a temporary
/// file in the same directory, fsynced, then renamed). Tensors are written
/// as contiguous CPU copies with requires_grad False.
/// \throws FormatError naming the path when it cannot be written, or a
///   value ddp cannot pickle.
void write_torch_file(const std::string& path, const PyValue& root);

/// Reads a file torch.save wrote (the zip format of PyTorch 1.6 and later).
/// Tensors come back on the CPU; a tensor's storage is shared by the
/// tensors that share it in the file.
/// \throws FormatError naming the path and the problem (Note [A hostile
///   file is an error]): no such file, another format (with a hint for
///   torch.save's legacy format and for TorchScript archives), a global
///   other than those of Note [The pickle subset ddp speaks], a malformed,
///   too deeply nested or cyclic pickle, a record that does not fit.
PyRef read_torch_file(const std::string& path);

}  // namespace ddp::formats

#pragma once

// Internal: the safetensors format (huggingface/safetensors, "Format"):
// an 8-byte little-endian header size N, N bytes of JSON naming each tensor's
// dtype ("F32", ...), shape and [begin, end) byte offsets into the data that
// follows, and an optional "__metadata__" map of strings; then the raw
// little-endian data, each tensor contiguous, in offset order with no gaps.

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ddp::snapshot::detail {

/// Named tensors in the order a state_dict lists them.
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

/// Writes `tensors` (as contiguous CPU copies, in this order) and `metadata`
/// to `path` atomically (a temporary file, fsynced, renamed).
/// \throws SnapshotError naming the path when it cannot be written, a name
///   given twice, or a dtype safetensors has no code for.
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

/// Reads a safetensors file: its tensors in offset order, on the CPU, and
/// its metadata into `metadata` where given.
/// \throws SnapshotError naming the path and the problem: too short, a
///   header that is not the format's JSON, offsets outside the data, with
///   gaps or overlapping, an unknown dtype, a shape that disagrees with its
///   byte count.
NamedTensors read_safetensors(const std::string& path,
                              std::map<std::string, std::string>* metadata = nullptr);

}  // namespace ddp::snapshot::detail

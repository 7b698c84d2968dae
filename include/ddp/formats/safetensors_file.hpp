#pragma once

/// \file safetensors_file.hpp
/// The safetensors format (huggingface/safetensors, "Format"): an 8-byte
/// little-endian header size N, N bytes of JSON naming each tensor's dtype
/// ("F32", ...), shape and [begin, end) byte offsets into the data that
/// follows, and an optional "__metadata__" map of strings; then the raw
/// little-endian data, each tensor contiguous, in offset order with no gaps.
/// A header is checked whole (dtypes, shapes, offsets, sizes without
/// overflow) before any tensor is allocated.

#include <ATen/core/Tensor.h>

#include <map>
#include <string>
#include <utility>
#include <vector>

namespace ddp::formats {

/// Named tensors in the order a state_dict lists them.
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

/// Writes `tensors` (as contiguous CPU copies, in this order) and `metadata`
/// to `path` atomically (a temporary file, fsynced, renamed).
/// \throws FormatError naming the path when it cannot be written, a name
///   given twice, or a dtype safetensors has no code for.
void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata = {});

/// Reads a safetensors file: its tensors in offset order, on the CPU, and
/// its metadata into `metadata` where given.
/// \throws FormatError naming the path and the problem: too short, a
///   header that is not the format's JSON, metadata that is not a map of
///   strings, offsets outside the data, with gaps or overlapping, an
///   unknown dtype, a negative dimension or a shape that disagrees with its
///   byte count.
NamedTensors read_safetensors(const std::string& path,
                              std::map<std::string, std::string>* metadata = nullptr);

}  // namespace ddp::formats

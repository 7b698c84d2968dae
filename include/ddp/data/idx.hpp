#pragma once

/// \file idx.hpp
/// Reading idx files, the format of MNIST and Fashion-MNIST (plain or
/// gzipped), into tensors.
///
/// The format: two zero bytes, a type code, the number of dimensions, then
/// each dimension as a big-endian uint32, then the elements in row-major
/// order, big-endian. Type codes: 0x08 uint8, 0x09 int8, 0x0B int16,
/// 0x0C int32, 0x0D float32, 0x0E float64.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>

#include "ddp/data/errors.hpp"

namespace ddp::data {

/// The most elements read_idx() accepts in one file (2^31): a larger count
/// is almost certainly a corrupted header, and would otherwise make the
/// reader try to allocate it.
inline constexpr int64_t kMaxIdxElements = int64_t{1} << 31;

/// Reads the idx file at `path`, gzipped (recognised by its 1f 8b magic,
/// whatever the file's name) or plain, into a CPU tensor of the file's
/// element type and shape (uint8 -> torch::kUInt8, int8 -> kInt8,
/// int16 -> kInt16, int32 -> kInt32, float32 -> kFloat32,
/// float64 -> kFloat64), converted to this machine's byte order.
/// \throws ddp::DataError naming `path` when the file is missing or unreadable,
///   does not start with an idx magic number (the bytes found are shown in
///   hex), has an unknown type code, declares more than kMaxIdxElements
///   elements, is truncated (expected and found byte counts), is corrupt
///   gzip, or has bytes after the data.
at::Tensor read_idx(const std::string& path);

}  // namespace ddp::data

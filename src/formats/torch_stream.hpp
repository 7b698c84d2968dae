#pragma once

// Internal: torch.save's zip archive as a stream inside a larger file and
// into any sink, for PyTorch's Distributed Checkpoint, whose .distcp files
// hold one torch.save stream per item (ddp/formats/dcp.hpp).

#include <cstdint>
#include <string>

#include "ddp/formats/py_value.hpp"
#include "formats/atomic_file.hpp"

namespace ddp::formats::detail {

/// What torch.load reads from the `length` bytes of `path` at `base`
/// (length kToTheEnd of zip_directory.hpp: to the file's end), checked as
/// read_torch_file() checks a whole file.
/// \throws FormatError naming the file, the byte and the problem.
PyRef read_torch_archive(const std::string& path, uint64_t base, uint64_t length);

/// torch.save(root, stream) into `sink`: the archive's offsets count from
/// the first byte given to the sink.
/// \throws FormatError for a value ddp cannot pickle or a failed write.
void write_torch_stream(const PyValue& root, const ByteSink& sink);

}  // namespace ddp::formats::detail

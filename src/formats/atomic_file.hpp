#pragma once

// Internal: writing an exported file atomically, as snapshots are written
// (Note [Writing is atomic] in ddp/snapshot/snapshot_manager.hpp): into
// `.<name>.tmp` beside it, fsynced, renamed into place, the directory
// fsynced. A reader sees the previous file or the whole new one.

#include <cstddef>
#include <functional>
#include <string>

namespace ddp::formats::detail {

/// Appends `size` bytes to the file being written; returns `size`, or 0
/// after a failed write (the failure is then thrown by write_atomically).
using ByteSink = std::function<size_t(const void* data, size_t size)>;

/// Creates `path`'s temporary file, lets `produce` write it through the
/// sink, then fsyncs and renames it. On any failure (thrown by `produce`, or
/// a failed write, fsync or rename) the temporary file is removed and a
/// FormatError names `path` and the cause; `what` ("the checkpoint", ...)
/// opens the message.
void write_atomically(const std::string& path, const std::string& what,
                      const std::function<void(const ByteSink&)>& produce);

}  // namespace ddp::formats::detail

#pragma once

// Internal: ddp::formats' failures as ddp::snapshot reports them. A
// function of ddp/snapshot/pytorch_checkpoint.hpp documents SnapshotError
// (exit code 9), so a FormatError from the file underneath is rethrown as
// one, with the same message.

#include <utility>

#include "ddp/formats/errors.hpp"
#include "ddp/snapshot/errors.hpp"

namespace ddp::snapshot::detail {

/// `read_or_write()`'s result; a FormatError it throws becomes a
/// SnapshotError with the same message.
template <typename Function>
auto as_snapshot_error(Function&& read_or_write) -> decltype(read_or_write()) {
  try {
    return std::forward<Function>(read_or_write)();
  } catch (const formats::FormatError& e) {
    throw SnapshotError(e.what());
  }
}

}  // namespace ddp::snapshot::detail

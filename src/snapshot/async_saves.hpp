#pragma once

// Internal: what a SnapshotManager keeps of its asynchronous saves (Note [An
// asynchronous save] in ddp/snapshot/snapshot_manager.hpp); its methods
// save_async(), wait() and settle() are in async_save.cpp.

#include <cstdint>
#include <exception>
#include <string>

#include "snapshot/background_writer.hpp"
#include "snapshot/staging_buffer.hpp"

namespace ddp::snapshot::detail {

/// The staged copies, the thread that writes them, and the save in flight.
struct AsyncSaves {
  StagingBuffer main_staging;     ///< Rank 0: the state less its shards.
  StagingBuffer shard_staging;    ///< This rank's shard.
  BackgroundWriter writer;        ///< After the buffers: it stops before they go.
  bool pending = false;           ///< A save_async() not yet settled; alike on every rank.
  bool sharded = false;           ///< Whether it writes shard files.
  std::string path;               ///< Its main file.
  std::string shard_path;         ///< This rank's shard file; empty when unsharded.
  std::exception_ptr unreported;  ///< Taken by settle(), not yet thrown.
  uint64_t attempts = 0;  ///< save_async() calls so far (Note [Shards agreed through the store]).

  /// Waits for the write in flight; prints a failure nothing reported on
  /// std::cerr. Never throws.
  ~AsyncSaves();
};

}  // namespace ddp::snapshot::detail

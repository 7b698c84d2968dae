#pragma once

// Internal: writing a training state's records as a snapshot's main file or
// as a rank's shard file (Note [Writing is atomic], Note [Sharded state in a
// snapshot] in ddp/snapshot/snapshot_manager.hpp). SnapshotManager::save()
// calls these on the training thread, save_async()'s background thread on
// the staged copies (Note [An asynchronous save]): one writing code.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "ddp/snapshot/snapshot_manager.hpp"

namespace ddp::snapshot::detail {

/// Records in the order a file holds them (StateRecords::tensors).
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

/// `<directory>/<prefix>-<sequence>.ddpsnap`.
std::string snapshot_path(const snapshot::SnapshotOptions& options, uint64_t sequence);

/// Writes `tensors` and the "scalars" record `scalars_text` atomically as
/// main file number `sequence`, then removes all but the newest keep_last
/// snapshots and any leftover temporary files, and fsyncs the directory.
/// Returns the file's path. \throws SnapshotError naming the file and why.
std::string write_main_file(const snapshot::SnapshotOptions& options, const NamedTensors& tensors,
                            const std::string& scalars_text, int world_size, uint64_t sequence);

/// Writes rank `rank`'s shard file of the main file `main_name` (number
/// `sequence`) into `directory`, atomically. \throws SnapshotError naming
/// the file and why.
void write_shard_file(const std::string& directory, const std::string& main_name,
                      const NamedTensors& tensors, const std::string& scalars_text, int rank,
                      int world, uint64_t sequence);

}  // namespace ddp::snapshot::detail

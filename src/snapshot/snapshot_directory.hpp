#pragma once

// Internal: the names of snapshot files in their directory (Note [What a
// snapshot file is], Note [Sharded state in a snapshot] in
// ddp/snapshot/snapshot_manager.hpp): finding them, numbering the next one,
// and removing those past keep_last.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ddp/snapshot/snapshot_manager.hpp"

namespace ddp::snapshot::detail {

/// `<prefix>-<sequence, 12 digits>.ddpsnap`.
std::string snapshot_file_name(const std::string& prefix, uint64_t sequence);

/// The sequence number of `<prefix>-<digits>.ddpsnap`, if `name` is one.
std::optional<uint64_t> snapshot_sequence(const std::string& name, const std::string& prefix);

/// `<prefix>-<sequence>.shard-<rank>-of-<world>.ddpsnap`, beside the main
/// file `main_name` (`<prefix>-<sequence>.ddpsnap`).
std::string shard_file_name(const std::string& main_name, int rank, int world);

/// The sequence number of a shard file of `prefix`, if `name` is one.
std::optional<uint64_t> shard_file_sequence(const std::string& name, const std::string& prefix);

/// A main snapshot file in the directory.
struct SnapshotCandidate {
  uint64_t sequence = 0;
  std::string path;
};

/// The main snapshot files in `directory`, newest (highest sequence) first.
std::vector<SnapshotCandidate> snapshot_candidates(const std::string& directory,
                                                   const std::string& prefix);

/// Creates the directory and returns the next snapshot's sequence number.
/// Throws SnapshotError.
uint64_t next_snapshot_sequence(const snapshot::SnapshotOptions& options);

/// Removes the shard files of snapshot `sequence` that a save which failed
/// before its main file left behind, so that none is taken for the next
/// save's (Note [An asynchronous save]).
void remove_shard_files(const snapshot::SnapshotOptions& options, uint64_t sequence);

/// Removes all but the newest keep_last main files, the shard files of
/// every other sequence (those of a save that failed too), and temporary
/// files of writers that died before their rename (Note [Writing is atomic]).
void prune_snapshots(const snapshot::SnapshotOptions& options);

}  // namespace ddp::snapshot::detail

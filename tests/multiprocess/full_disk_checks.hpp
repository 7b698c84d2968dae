#pragma once

// Every writer of a training state on a disk that fails under it, run by
// ddp_test_worker ("full-disk") at 1 and 3 ranks on a tmpfs the test
// mounts (tests/multiprocess/full_disk_test.cpp):
//
//   --phase enospc  rank 0 fills the filesystem to 16 KiB before each
//                   writer's second save (ENOSPC part way through a file);
//   --phase full    the same, to no byte free (ENOSPC at a file's first
//                   write, the header of a snapshot);
//   --phase eio     writes to the directory's files fail with EIO from
//                   16 KiB on (tests/common/failing_writes.cpp, preloaded);
//   --phase eio-rank-1  the same on rank 1 alone, which the others learn
//                   from: the writers rank 1 takes part in.
//
// For each writer: snapshots (SnapshotManager::save and save_async, their
// shard files and main file), DCP (save_distributed_checkpoint), the
// consolidated export (save_consolidated) and export_checkpoint (rank 0):
// it saves once, the disk fails, it saves again, and then
//   - the failure is a SnapshotError on every rank that names the
//     directory and the cause ("No space left on device", "Input/output
//     error");
//   - no checkpoint of the failed save exists and no temporary file is left;
//   - the first save loads, with the values it saved;
//   - once the disk works again, the writer saves, and training goes on.
// Each check is reported by name; full_disk_check_names() lists them.

#include <memory>
#include <set>
#include <string>
#include <vector>

#include <filesystem>
#include <fstream>

#include "common/mounted_tmpfs.hpp"
#include "common/named_checks.hpp"
#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::testing {

/// Runs `phase` in `directory` (the tmpfs); prints each check and returns
/// how many failed.
int check_full_disk(const std::shared_ptr<ProcessGroup>& group, const std::string& phase,
                    const std::string& directory);

namespace full_disk_check {
inline const std::vector<std::string> kWriters = {"snapshot", "snapshot-async", "dcp",
                                                  "consolidated", "export"};
inline const std::string kNamedError =
    "the failed save is a SnapshotError naming the directory and the cause";
inline const std::string kNothingLeft =
    "no checkpoint of the failed save and no temporary file are left";
inline const std::string kPreviousLoads = "the previous save loads with its values";
inline const std::string kSavesAgain = "once the disk works again it saves, and training goes on";
/// A writer's check, e.g. "dcp: the previous save loads with its values".
inline std::string of(const std::string& writer, const std::string& check) {
  return check_name(writer, check);
}

/// Where a file starts to fail: what "enospc" leaves free, and the offset
/// from which "eio" fails writes (DDP_TEST_FAIL_WRITES_AT).
inline constexpr int64_t kFailsFrom = 16 * 1024;
/// The file that fills the disk, and the one that arms the failing writes
/// (tests/common/failing_writes.cpp), in the disk's directory.
inline const std::string kFiller = "filler";
inline const std::string kArmed = ".fail-writes";

/// Whether `phase` fails writes with EIO (else it fills the disk).
inline bool fails_with_eio(const std::string& phase) { return phase.rfind("eio", 0) == 0; }

/// What a write on `phase`'s broken disk fails with, in strerror's words.
inline std::string cause_of(const std::string& phase) {
  return fails_with_eio(phase) ? "Input/output error" : "No space left on device";
}

/// Breaks the disk at `directory` as `phase` says: arms the failing writes,
/// or fills it to kFailsFrom bytes ("enospc") or to none ("full").
inline void break_disk(const std::string& directory, const std::string& phase) {
  if (fails_with_eio(phase)) {
    std::ofstream(std::filesystem::path(directory) / kArmed) << "armed\n";
  } else {
    MountedTmpfs::fill(directory, kFiller, phase == "enospc" ? kFailsFrom : 0);
  }
}

/// Makes the disk at `directory` work again.
inline void heal_disk(const std::string& directory) {
  std::error_code ignored;
  std::filesystem::remove(std::filesystem::path(directory) / kFiller, ignored);
  std::filesystem::remove(std::filesystem::path(directory) / kArmed, ignored);
}
}  // namespace full_disk_check

/// The names check_full_disk() reports on `rank` in `phase` (export's run
/// on rank 0).
inline std::set<std::string> full_disk_check_names(const std::string& phase, int rank) {
  using namespace full_disk_check;  // NOLINT(google-build-using-namespace)
  std::set<std::string> names;
  for (const std::string& writer : kWriters) {
    if (writer == "export" && rank != 0) continue;
    if (phase == "eio-rank-1" && (writer == "consolidated" || writer == "export")) continue;
    for (const std::string& check : {kNamedError, kNothingLeft, kPreviousLoads, kSavesAgain}) {
      names.insert(of(writer, check));
    }
  }
  return names;
}

}  // namespace ddp::testing

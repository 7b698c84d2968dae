#pragma once

/// \file errors.hpp
/// The exceptions of ddp::snapshot (Note [One exception type per failure kind] in
/// ddp/comm/errors.hpp). Each kind's exit code is in the one table,
/// Note [Exit codes] there. The names are also ddp's (ddp::SnapshotError).

#include "ddp/comm/errors.hpp"

namespace ddp::snapshot {

/// A file that is not a ddp snapshot, a corrupt or truncated one, a
/// snapshot that cannot be written, or one that does not fit the objects it
/// is loaded into. The message names the file and the problem. Thrown by
/// SnapshotManager, read_snapshot_file() and restore_training_state().
class SnapshotError : public comm::ErrorOfKind<SnapshotError, comm::ExitCode::kSnapshot> {
 public:
  using ErrorOfKind::ErrorOfKind;
};

}  // namespace ddp::snapshot

namespace ddp {
// Also ddp's names, as every kind's was when ddp/comm/errors.hpp declared them all.
using snapshot::SnapshotError;
}  // namespace ddp

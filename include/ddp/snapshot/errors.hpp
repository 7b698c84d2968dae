#pragma once

/// \file errors.hpp
/// The exceptions of ddp::snapshot (Note [One exception type per failure kind] in
/// ddp/base/errors.hpp). Each kind's exit code is in the one table,
/// Note [Exit codes] there. The names are also ddp's (ddp::SnapshotError).

#include <string>
#include <utility>
#include <vector>

#include "ddp/base/errors.hpp"

namespace ddp::snapshot {

/// A file that is not a ddp snapshot, a corrupt or truncated one, a
/// snapshot that cannot be written, or one that does not fit the objects it
/// is loaded into. The message names the file and the problem. Thrown by
/// SnapshotManager, read_snapshot_file() and restore_training_state().
class SnapshotError : public base::ErrorOfKind<SnapshotError, base::ExitCode::kSnapshot> {
 public:
  using ErrorOfKind::ErrorOfKind;
};

/// A state_dict whose names or shapes do not fit the model it is loaded
/// into (import_checkpoint(), ddp/snapshot/pytorch_checkpoint.hpp): a
/// SnapshotError of exit code 9 that also lists the differences by name.
class StateDictMismatchError : public SnapshotError {
 public:
  StateDictMismatchError(const std::string& message, std::vector<std::string> missing,
                         std::vector<std::string> unexpected,
                         std::vector<std::string> shape_differs)
      : SnapshotError(message),
        missing_(std::move(missing)),
        unexpected_(std::move(unexpected)),
        shape_differs_(std::move(shape_differs)) {}
  /// The model's keys the file lacks.
  const std::vector<std::string>& missing() const noexcept { return missing_; }
  /// The file's keys the model lacks.
  const std::vector<std::string>& unexpected() const noexcept { return unexpected_; }
  /// Keys both have with different shapes.
  const std::vector<std::string>& shape_differs() const noexcept { return shape_differs_; }
  /// Keeps the kind and the lists.
  [[noreturn]] void rethrow_with_prefix(const std::string& prefix) const override {
    throw StateDictMismatchError(prefix + what(), missing_, unexpected_, shape_differs_);
  }

 private:
  std::vector<std::string> missing_, unexpected_, shape_differs_;
};

}  // namespace ddp::snapshot

namespace ddp {
// Also ddp's names, as every kind's was when ddp/base/errors.hpp declared them all.
using snapshot::SnapshotError;
using snapshot::StateDictMismatchError;
}  // namespace ddp

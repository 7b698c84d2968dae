#pragma once

/// \file snapshot.hpp
/// Verified training snapshots in one include (namespace ddp::snapshot):
/// SnapshotManager, TrainingState, read_snapshot_file, SnapshotError,
/// save_consolidated, export_checkpoint and import_checkpoint. Library
/// ddp::snapshot.

#include "ddp/snapshot/consolidated_export.hpp"     // IWYU pragma: export
#include "ddp/snapshot/distributed_checkpoint.hpp"  // IWYU pragma: export
#include "ddp/snapshot/errors.hpp"                  // IWYU pragma: export
#include "ddp/snapshot/pytorch_checkpoint.hpp"      // IWYU pragma: export
#include "ddp/snapshot/snapshot_manager.hpp"        // IWYU pragma: export

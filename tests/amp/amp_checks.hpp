#pragma once

// Mixed precision and the gradient scaler on each rank of a real process
// group, run by amp_test_worker. Each check is reported by name
// (tests/common/named_checks.hpp) and returns how many failed; the parent
// test (amp_multiprocess_test.cpp) lists the names it expects.

#include <memory>

#include "ddp/process_group.hpp"

namespace ddp::testing {

/// An inf or NaN injected into the last rank's gradient: with the scaler's
/// group every rank skips the step, keeps its parameters and halves the
/// scale; growth after exactly growth_interval clean steps; without the
/// group only the overflowing rank skips.
int checkScalerOverflow(const std::shared_ptr<ProcessGroup>& group);

/// Opt levels under DistributedDataParallel: O1 against one process on the
/// whole batch; the tutorial ConvNet with SyncBatchNorm at O1 with a
/// scaler; O2 (masters aligned across ranks, an overflow on one rank
/// skipped by all); O3. Replicas stay bit-identical.
int checkAmpWithDdp(const std::shared_ptr<ProcessGroup>& group);

}  // namespace ddp::testing

#pragma once

// Checks of the shared-memory engine run on each rank by ddp_test_worker:
// results equal Gloo's and the closed form, for every dtype and op, sizes
// from one element to 64 MiB; and a stress loop of overlapping collectives.

#include "ddp/process_group.hpp"
#include "multiprocess/worker_checks.hpp"

namespace ddp::testing {

/// All-reduce (every dtype, op and size), broadcast (every root),
/// all-gather and reduce-scatter through `shm` against `gloo` and the
/// closed form.
CheckReport checkShmAgainstGloo(ProcessGroup& gloo, ProcessGroup& shm);

/// `iterations` rounds of randomly sized collectives (the same sequence on
/// every rank), several in flight at once, each checked on completion.
CheckReport stressCollectives(ProcessGroup& group, int iterations);

}  // namespace ddp::testing

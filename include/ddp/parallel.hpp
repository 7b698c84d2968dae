#pragma once

/// \file parallel.hpp
/// The parallel-training layer in one include (namespace ddp::parallel,
/// whose names are also ddp's): DistributedDataParallel with its comm hooks,
/// PowerSGD, static graph and Join; ZeroRedundancyOptimizer; DataParallel;
/// CapturedStep.

#include "ddp/parallel/captured_step.hpp"                // IWYU pragma: export
#include "ddp/parallel/comm_hook.hpp"                    // IWYU pragma: export
#include "ddp/parallel/data_parallel.hpp"                // IWYU pragma: export
#include "ddp/parallel/distributed_data_parallel.hpp"    // IWYU pragma: export
#include "ddp/parallel/fully_sharded_data_parallel.hpp"  // IWYU pragma: export
#include "ddp/parallel/fully_sharded_state.hpp"          // IWYU pragma: export
#include "ddp/parallel/fully_sharded_units.hpp"          // IWYU pragma: export
#include "ddp/parallel/join.hpp"                         // IWYU pragma: export
#include "ddp/parallel/output_tensors.hpp"               // IWYU pragma: export
#include "ddp/parallel/powersgd_hook.hpp"                // IWYU pragma: export
#include "ddp/parallel/sharded_construction.hpp"         // IWYU pragma: export
#include "ddp/parallel/sharded_state.hpp"                // IWYU pragma: export
#include "ddp/parallel/wrapped_module.hpp"               // IWYU pragma: export
#include "ddp/parallel/zero_redundancy_optimizer.hpp"    // IWYU pragma: export

#pragma once

/// \file ddp.hpp
/// Everything of ddp's public API in one include.

// The core: process groups, DistributedDataParallel, DataParallel.
#include "ddp/broadcast_tensors.hpp"          // IWYU pragma: export
#include "ddp/captured_step.hpp"              // IWYU pragma: export
#include "ddp/collective_observer.hpp"        // IWYU pragma: export
#include "ddp/comm_hook.hpp"                  // IWYU pragma: export
#include "ddp/data_parallel.hpp"              // IWYU pragma: export
#include "ddp/distributed_data_parallel.hpp"  // IWYU pragma: export
#include "ddp/environment.hpp"                // IWYU pragma: export
#include "ddp/error_file.hpp"                 // IWYU pragma: export
#include "ddp/errors.hpp"                     // IWYU pragma: export
#include "ddp/flight_recorder.hpp"            // IWYU pragma: export
#include "ddp/init.hpp"                       // IWYU pragma: export
#include "ddp/join.hpp"                       // IWYU pragma: export
#include "ddp/observer_factory.hpp"           // IWYU pragma: export
#include "ddp/powersgd_hook.hpp"              // IWYU pragma: export
#include "ddp/process_group.hpp"              // IWYU pragma: export
#include "ddp/work.hpp"                       // IWYU pragma: export
#include "ddp/zero_redundancy_optimizer.hpp"  // IWYU pragma: export
// The parts, each a folder of include/ddp/ with a namespace of its own.
#include "ddp/amp.hpp"       // IWYU pragma: export
#include "ddp/hvd.hpp"       // IWYU pragma: export
#include "ddp/nn.hpp"        // IWYU pragma: export
#include "ddp/snapshot.hpp"  // IWYU pragma: export
#include "ddp/timeline.hpp"  // IWYU pragma: export

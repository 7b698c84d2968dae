#pragma once

/// \file comm.hpp
/// The communication layer in one include (namespace ddp::comm, whose names
/// are also ddp's): init(), process groups and Work, the rendezvous store,
/// the environment, the error file, the flight recorder and the collective
/// observers. It includes the base layer below it (ddp/base.hpp: ddp::Error,
/// its kinds and their exit codes).

#include "ddp/base.hpp"                      // IWYU pragma: export
#include "ddp/comm/broadcast_tensors.hpp"    // IWYU pragma: export
#include "ddp/comm/collective_observer.hpp"  // IWYU pragma: export
#include "ddp/comm/device_mesh.hpp"          // IWYU pragma: export
#include "ddp/comm/environment.hpp"          // IWYU pragma: export
#include "ddp/comm/error_file.hpp"           // IWYU pragma: export
#include "ddp/comm/flight_recorder.hpp"      // IWYU pragma: export
#include "ddp/comm/init.hpp"                 // IWYU pragma: export
#include "ddp/comm/observer_factory.hpp"     // IWYU pragma: export
#include "ddp/comm/process_group.hpp"        // IWYU pragma: export
#include "ddp/comm/process_group_fwd.hpp"    // IWYU pragma: export
#include "ddp/comm/reduce_op.hpp"            // IWYU pragma: export
#include "ddp/comm/tcp_store.hpp"            // IWYU pragma: export
#include "ddp/comm/work.hpp"                 // IWYU pragma: export

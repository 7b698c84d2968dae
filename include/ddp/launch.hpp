#pragma once

/// \file launch.hpp
/// The launcher layer's public headers in one include (namespace
/// ddp::launch, library ddp::launch): port reservations and LaunchError.
///
/// Note [The launcher's internal headers]
/// What ddprun is made of (the agent, its options, the node rendezvous,
/// the recovery store, the workers' environment) is internal and lives in
/// src/launch/, not installed. ddp/launch/child_process.hpp stays under
/// include/ for the tests, tools and benchmarks of this tree, but is
/// internal too: cmake/DdpInstall.cmake leaves it out of the installed
/// headers, and this header does not include it.

#include "ddp/launch/errors.hpp"            // IWYU pragma: export
#include "ddp/launch/port_reservation.hpp"  // IWYU pragma: export

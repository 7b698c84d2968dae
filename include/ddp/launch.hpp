#pragma once

/// \file launch.hpp
/// The launcher layer in one include (namespace ddp::launch, library
/// ddp::launch): what ddprun is made of, to start and watch ranks from a
/// program: the agent, its options (torchrun's command line), the node
/// rendezvous, the recovery store, child processes with deadlines and port
/// reservations, and LaunchError.

#include "ddp/launch/agent.hpp"             // IWYU pragma: export
#include "ddp/launch/child_process.hpp"     // IWYU pragma: export
#include "ddp/launch/errors.hpp"            // IWYU pragma: export
#include "ddp/launch/launch_options.hpp"    // IWYU pragma: export
#include "ddp/launch/node_rendezvous.hpp"   // IWYU pragma: export
#include "ddp/launch/port_reservation.hpp"  // IWYU pragma: export
#include "ddp/launch/recovery_store.hpp"    // IWYU pragma: export

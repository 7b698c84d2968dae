#pragma once

/// \file timeline.hpp
/// Horovod's timeline in one include (namespace ddp::timeline): a
/// chrome://tracing file of every collective, recorded by a collective
/// observer (ddp/comm/collective_observer.hpp).

#include "ddp/timeline/timeline.hpp"  // IWYU pragma: export

#pragma once

/// \file timeline.hpp
/// Horovod's timeline in one include (namespace ddp::timeline): a
/// chrome://tracing file of every collective, recorded by a ProcessGroup
/// decorator.

#include "ddp/timeline/timeline.hpp"  // IWYU pragma: export

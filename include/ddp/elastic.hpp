#pragma once

/// \file elastic.hpp
/// Recovery in memory in one include (namespace ddp::elastic): State
/// (commit, restore, sync) and run(), for `ddprun --recovery memory`.
/// Library ddp::elastic.

#include "ddp/elastic/membership_change.hpp"  // IWYU pragma: export
#include "ddp/elastic/run.hpp"                // IWYU pragma: export
#include "ddp/elastic/state.hpp"              // IWYU pragma: export

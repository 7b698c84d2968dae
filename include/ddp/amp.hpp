#pragma once

/// \file amp.hpp
/// Mixed precision in one include (namespace ddp::amp): Apex's opt levels
/// O0-O3 (MixedPrecision), autocast, and the gradient scaler.

#include "ddp/amp/autocast.hpp"         // IWYU pragma: export
#include "ddp/amp/grad_scaler.hpp"      // IWYU pragma: export
#include "ddp/amp/mixed_precision.hpp"  // IWYU pragma: export

#pragma once

/// \file training.hpp
/// Training feedback in one include (namespace ddp::training, library
/// ddp::training): progress lines, the metrics CSV and gnuplot curves, and
/// their errors (MetricsError, PlotError); the FLOPs of the matrix products
/// and the machine's measured peak, for MFU.

#include "ddp/training/errors.hpp"        // IWYU pragma: export
#include "ddp/training/flop_counter.hpp"  // IWYU pragma: export
#include "ddp/training/machine_peak.hpp"  // IWYU pragma: export
#include "ddp/training/metrics_csv.hpp"   // IWYU pragma: export
#include "ddp/training/plot.hpp"          // IWYU pragma: export
#include "ddp/training/progress.hpp"      // IWYU pragma: export

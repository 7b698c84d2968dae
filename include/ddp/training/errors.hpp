#pragma once

/// \file errors.hpp
/// The exceptions of ddp::training (Note [One exception type per failure kind]
/// in ddp/base/errors.hpp). Each kind's exit code is in the one table,
/// Note [Exit codes] there. The names are also ddp's (ddp::MetricsError).

#include "ddp/base/errors.hpp"

namespace ddp::training {

/// A metrics file that cannot be written or read back: the message names
/// the file, the line and what is wrong. Thrown by
/// ddp::training::MetricsCsv and ddp::training::read_metrics_csv().
class MetricsError : public base::ErrorOfKind<MetricsError, base::ExitCode::kMetrics> {
 public:
  using ErrorOfKind::ErrorOfKind;
};

/// A plot could not be made: gnuplot is not installed, it failed (its
/// output is quoted), or the CSV has no rows to draw. Thrown by
/// ddp::training::plot_loss_accuracy() and ddp::training::require_gnuplot().
class PlotError : public base::ErrorOfKind<PlotError, base::ExitCode::kPlot> {
 public:
  using ErrorOfKind::ErrorOfKind;
};

}  // namespace ddp::training

namespace ddp {
// Also ddp's names, as every kind's was when ddp/base/errors.hpp declared them all.
using training::MetricsError;
using training::PlotError;
}  // namespace ddp

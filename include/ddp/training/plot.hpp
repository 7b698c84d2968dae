#pragma once

/// \file plot.hpp
/// Loss and accuracy curves of a metrics CSV (ddp/training/metrics_csv.hpp),
/// rendered to a PNG by gnuplot.
///
/// \code
///   ddp::training::plot_loss_accuracy("metrics.csv", "curves.png");
/// \endcode
///
/// Note [Why gnuplot]
/// A C++ training program should not carry a plotting library. gnuplot is
/// one Debian package (gnuplot-nox, no X needed), reads the CSV as it is,
/// and is run as a separate process only when a plot is asked for; without
/// it, everything but the picture still works and the error says how to
/// install it.

#include <torch/arg.h>

#include <string>

#include "ddp/training/errors.hpp"

namespace ddp::training {

/// Options of plot_loss_accuracy().
struct PlotOptions {
  /// The title above the curves.
  TORCH_ARG(std::string, title) = "training";
  /// Image width in pixels.
  TORCH_ARG(int, width) = 960;
  /// Image height in pixels.
  TORCH_ARG(int, height) = 540;
  /// The gnuplot program: a name looked up in PATH, or a path.
  TORCH_ARG(std::string, gnuplot) = "gnuplot";
};

/// Renders the training loss (left axis) and, when the CSV has any, the
/// test accuracy (right axis) against the epoch into the PNG file `png`
/// (its directory is created).
/// \throws ddp::MetricsError when the CSV cannot be read; ddp::PlotError
///   when it has no rows, gnuplot is not found (naming the package to
///   install), or gnuplot fails or writes no image (quoting its output);
///   ddp::ConfigError for a non-positive size.
void plot_loss_accuracy(const std::string& csv, const std::string& png,
                        const PlotOptions& options = {});

/// Checks, before training starts, that plot_loss_accuracy() will find
/// gnuplot. \throws ddp::PlotError naming options.gnuplot() and the
/// package to install when it cannot be found.
void require_gnuplot(const PlotOptions& options = {});

}  // namespace ddp::training

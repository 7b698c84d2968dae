#pragma once

// Rank 0's per-epoch metrics CSV and loss/accuracy curves, as --metrics-csv
// and --plot ask.

#include <filesystem>
#include <optional>
#include <string>

#include "common/cli.hpp"
#include "ddp/training/metrics_csv.hpp"
#include "ddp/training/plot.hpp"

namespace ddp::examples {

/// Writes the CSV rows (rank 0) and draws the curves at the end.
class MetricsOutput {
 public:
  /// `completed_epochs`: epochs a resumed snapshot had finished, whose rows
  /// are kept. Without --metrics-csv, --plot writes its CSV next to the PNG.
  MetricsOutput(const CommonOptions& o, int rank, int64_t completed_epochs, std::string title)
      : plot_(o.plot), title_(std::move(title)) {
    if (rank != 0) return;
    std::string path = o.metrics_csv;
    if (path.empty() && !plot_.empty())
      path = std::filesystem::path(plot_).replace_extension(".csv").string();
    if (!path.empty()) csv_.emplace(path, completed_epochs);
  }

  /// Appends an epoch's row (rank 0 only; elsewhere nothing).
  void record(const training::EpochMetrics& row) {
    if (csv_) csv_->append(row);
  }

  /// Draws the curves when --plot was given (rank 0); returns what was
  /// written, for the log, or "".
  std::string finish() {
    if (!csv_) return "";
    if (plot_.empty()) return "metrics in " + csv_->path();
    training::plot_loss_accuracy(csv_->path(), plot_, training::PlotOptions().title(title_));
    return "curves in " + plot_ + ", metrics in " + csv_->path();
  }

 private:
  std::string plot_, title_;
  std::optional<training::MetricsCsv> csv_;
};

}  // namespace ddp::examples

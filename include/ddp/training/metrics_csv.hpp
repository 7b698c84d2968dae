#pragma once

/// \file metrics_csv.hpp
/// A per-epoch metrics file: one CSV row per epoch, readable by
/// spreadsheets, gnuplot (ddp::training::plot_loss_accuracy) and scripts.
///
/// \code
///   ddp::training::MetricsCsv csv("metrics.csv", /*completed_epochs=*/state.epoch);
///   csv.append({epoch + 1, done.mean_loss, accuracy, done.samples_per_s, done.seconds});
/// \endcode
///
/// Note [A resumed run rewrites the epochs it repeats]
/// A job restarted from a snapshot repeats the epochs after the snapshot,
/// and their rows may already be in the file (written before the crash).
/// Opening keeps the rows of the epochs the snapshot had completed and drops
/// later ones, so the file has each epoch once, in order, whatever the
/// restarts.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ddp/training/errors.hpp"

namespace ddp::training {

/// One row: an epoch's figures.
struct EpochMetrics {
  int64_t epoch = 0;               ///< 1-based epoch number.
  double loss = 0;                 ///< Mean training loss of the epoch.
  std::optional<double> accuracy;  ///< Test accuracy in [0,1]; empty without a test set.
  double samples_per_s = 0;        ///< Training throughput over all ranks.
  double seconds = 0;              ///< Wall time of the epoch's training.
};

/// The header line MetricsCsv writes.
inline constexpr const char* kMetricsCsvHeader = "epoch,loss,accuracy,samples_per_s,seconds";

/// Appends EpochMetrics rows to a CSV file (header
/// `epoch,loss,accuracy,samples_per_s,seconds`), flushing each row so the
/// file is current while training runs. Only one process (rank 0) should
/// write a given file.
class MetricsCsv {
 public:
  /// Opens `path` (creating its directory): rows of epochs 1 to
  /// `completed_epochs` already in a file with this header are kept, the
  /// rest is rewritten (Note [A resumed run rewrites the epochs it repeats]).
  /// \throws ddp::MetricsError when the file cannot be created or written, or
  ///   when completed_epochs > 0 and the existing file is not a metrics CSV.
  explicit MetricsCsv(std::string path, int64_t completed_epochs = 0);

  /// Writes `row` and flushes it. \throws ddp::MetricsError on a write error.
  void append(const EpochMetrics& row);

  /// The file written.
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

/// Reads every row of a metrics CSV.
/// \throws ddp::MetricsError when the file is missing, has another header,
///   or a row is malformed (naming the line).
std::vector<EpochMetrics> read_metrics_csv(const std::string& path);

}  // namespace ddp::training

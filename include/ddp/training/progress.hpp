#pragma once

/// \file progress.hpp
/// What a training program shows while it runs: on rank 0 one progress line
/// per epoch (step, loss, samples/s, time left), redrawn in place on a
/// terminal and printed as plain lines into a log; every rank's messages
/// prefixed with "[rank r]".
///
/// \code
///   ddp::training::ProgressReporter progress(group->rank(), epochs, steps_per_epoch,
///                                            steps_to_run);
///   for (int64_t epoch = 0; epoch < epochs; ++epoch) {
///     progress.begin_epoch(epoch);
///     for (int64_t step = 0; step < steps_per_epoch; ++step) {
///       progress.step(train_step(model).item<double>(), global_batch);
///     }
///     ddp::training::EpochProgress done = progress.end_epoch();
///     progress.message("test accuracy " + std::to_string(accuracy));
///   }
/// \endcode
///
/// Note [Progress on a terminal and in a log]
/// A terminal shows the latest state best: the epoch's line is rewritten
/// after '\r' at most every redraw_interval, and ends with a newline when
/// the epoch does, so the screen keeps one line per epoch. A log file (or
/// ddprun's pipe) cannot be rewritten: there the reporter prints a plain
/// line at most every log_interval, so that a long epoch still shows that
/// it advances, and always the epoch's last line.

#include <torch/arg.h>

#include <chrono>
#include <cstdint>
#include <iosfwd>
#include <optional>
#include <string>

namespace ddp::training {

/// Where a ProgressReporter writes (a pointer, not owned). A named type
/// because TORCH_ARG pastes `const T&`, which a bare `std::ostream*` would
/// turn into a pointer to const.
using OutputStream = std::ostream*;

/// Options of ProgressReporter.
struct ProgressOptions {
  /// Redraw the line in place with '\r' (true) or print plain lines (false).
  /// Unset: in place when the stream is std::cout and that is a terminal.
  TORCH_ARG(std::optional<bool>, in_place) = std::nullopt;
  /// Least time between two redraws on a terminal.
  TORCH_ARG(std::chrono::milliseconds, redraw_interval) = std::chrono::milliseconds(200);
  /// Least time between two intermediate plain lines in a log; 0 prints a
  /// line after every step. The epoch's last line is always printed.
  TORCH_ARG(std::chrono::milliseconds, log_interval) = std::chrono::seconds(30);
  /// Where lines go (not owned; must outlive the reporter); null means
  /// std::cout.
  TORCH_ARG(OutputStream, stream) = nullptr;
};

/// One epoch as this rank saw it.
struct EpochProgress {
  int64_t epoch = 0;         ///< 0-based epoch index.
  int64_t steps = 0;         ///< Steps done in this epoch by this process.
  double mean_loss = 0;      ///< Mean of the losses passed to step().
  double samples_per_s = 0;  ///< Samples passed to step() per second.
  double seconds = 0;        ///< From begin_epoch() to end_epoch().
};

/// Shows training progress (rank 0) and rank-prefixed messages (all ranks).
class ProgressReporter {
 public:
  /// `epochs` and `steps_per_epoch` describe the whole training, shown as
  /// "epoch e/E step s/S"; `steps_to_run` is how many steps this process
  /// will do (after a resume, with --max-steps), from which the time left is
  /// estimated. Time is measured from construction, so that evaluation
  /// between epochs counts too.
  /// \throws ConfigError for a negative rank, epochs or steps_per_epoch < 1,
  ///   a negative steps_to_run, or negative intervals.
  ProgressReporter(int rank, int64_t epochs, int64_t steps_per_epoch, int64_t steps_to_run,
                   ProgressOptions options = {});
  /// Ends a line left open on a terminal.
  ~ProgressReporter();
  ProgressReporter(const ProgressReporter&) = delete;
  ProgressReporter& operator=(const ProgressReporter&) = delete;

  /// Starts epoch `epoch` (0-based) at step `first_step` of it (non-zero
  /// when resuming in the middle of the epoch).
  void begin_epoch(int64_t epoch, int64_t first_step = 0);
  /// Records one finished step: its loss on this rank and the samples it
  /// trained on across all ranks (for samples/s).
  void step(double loss, int64_t samples);
  /// Prints the epoch's last line (rank 0) and returns its figures.
  EpochProgress end_epoch();

  /// Prints "[rank r] text" as its own line, on any rank.
  void message(const std::string& text);

  /// Whether lines are redrawn in place.
  bool in_place() const noexcept { return in_place_; }
  /// The prefix of this rank's lines, "[rank r] ".
  const std::string& prefix() const noexcept { return prefix_; }

 private:
  using Clock = std::chrono::steady_clock;
  std::string line(bool final) const;
  void show(bool final);

  int rank_;
  int64_t epochs_, steps_per_epoch_, steps_to_run_;
  ProgressOptions options_;
  std::ostream* out_;
  bool in_place_;
  std::string prefix_;
  Clock::time_point started_, epoch_started_, last_shown_;
  int64_t epoch_ = 0, step_in_epoch_ = 0, steps_done_ = 0;
  int64_t epoch_steps_ = 0, epoch_samples_ = 0;
  double epoch_loss_sum_ = 0;
  size_t drawn_width_ = 0;  // Width of the line now on the terminal; 0: none open.
};

/// "1h02m", "4m05s", "12s": a duration for people.
std::string format_duration(double seconds);

}  // namespace ddp::training

#include "ddp/training/progress.hpp"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

#include "base/str.hpp"
#include "ddp/base/errors.hpp"

namespace ddp::training {
namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw ConfigError("ProgressReporter: " + what);
}

std::string fixed(double value, int decimals) {
  char text[64];
  std::snprintf(text, sizeof(text), "%.*f", decimals, value);
  return text;
}

}  // namespace

std::string format_duration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  const auto total = static_cast<int64_t>(std::llround(seconds));
  char text[64];
  if (total >= 3600) {
    std::snprintf(text, sizeof(text), "%lldh%02lldm", static_cast<long long>(total / 3600),
                  static_cast<long long>(total % 3600 / 60));
  } else if (total >= 60) {
    std::snprintf(text, sizeof(text), "%lldm%02llds", static_cast<long long>(total / 60),
                  static_cast<long long>(total % 60));
  } else {
    std::snprintf(text, sizeof(text), "%llds", static_cast<long long>(total));
  }
  return text;
}

ProgressReporter::ProgressReporter(int rank, int64_t epochs, int64_t steps_per_epoch,
                                   int64_t steps_to_run, ProgressOptions options)
    : rank_(rank),
      epochs_(epochs),
      steps_per_epoch_(steps_per_epoch),
      steps_to_run_(steps_to_run),
      options_(options),
      out_(options.stream() ? options.stream() : &std::cout),
      prefix_(base::detail::str("[rank ", rank, "] ")),
      started_(Clock::now()) {
  require(rank >= 0, base::detail::str("rank is ", rank, "; pass group->rank()."));
  require(epochs >= 1, base::detail::str("epochs is ", epochs, "; it must be at least 1."));
  require(steps_per_epoch >= 1,
          base::detail::str("steps_per_epoch is ", steps_per_epoch,
                            "; it must be at least 1 (is the dataset empty?)."));
  require(steps_to_run >= 0,
          base::detail::str("steps_to_run is ", steps_to_run, "; it must be 0 or more."));
  require(options.redraw_interval().count() >= 0 && options.log_interval().count() >= 0,
          base::detail::str("redraw_interval and log_interval must be 0 or more (got ",
                            options.redraw_interval().count(), " ms and ",
                            options.log_interval().count(), " ms)."));
  in_place_ = options.in_place().has_value() ? *options.in_place()
                                             : out_ == &std::cout && isatty(STDOUT_FILENO) == 1;
}

ProgressReporter::~ProgressReporter() {
  if (drawn_width_ > 0) *out_ << std::endl;
}

void ProgressReporter::begin_epoch(int64_t epoch, int64_t first_step) {
  epoch_ = epoch;
  step_in_epoch_ = first_step;
  epoch_steps_ = 0;
  epoch_samples_ = 0;
  epoch_loss_sum_ = 0;
  epoch_started_ = Clock::now();
  last_shown_ = epoch_started_;
}

void ProgressReporter::step(double loss, int64_t samples) {
  ++step_in_epoch_;
  ++epoch_steps_;
  ++steps_done_;
  epoch_samples_ += samples;
  epoch_loss_sum_ += loss;
  if (rank_ != 0) return;
  const auto since = Clock::now() - last_shown_;
  if (since >= (in_place_ ? options_.redraw_interval() : options_.log_interval())) show(false);
}

EpochProgress ProgressReporter::end_epoch() {
  EpochProgress done;
  done.epoch = epoch_;
  done.steps = epoch_steps_;
  done.mean_loss = epoch_steps_ ? epoch_loss_sum_ / static_cast<double>(epoch_steps_) : 0.0;
  done.seconds = std::chrono::duration<double>(Clock::now() - epoch_started_).count();
  done.samples_per_s = done.seconds > 0 ? static_cast<double>(epoch_samples_) / done.seconds : 0.0;
  if (rank_ == 0) show(true);
  return done;
}

void ProgressReporter::message(const std::string& text) {
  if (drawn_width_ > 0) {  // Keep the progress line; the message goes below it.
    *out_ << '\n';
    drawn_width_ = 0;
  }
  *out_ << prefix_ << text << std::endl;
}

std::string ProgressReporter::line(bool final) const {
  const double elapsed = std::chrono::duration<double>(Clock::now() - started_).count();
  const double epoch_seconds = std::chrono::duration<double>(Clock::now() - epoch_started_).count();
  const double mean_loss = epoch_steps_ ? epoch_loss_sum_ / static_cast<double>(epoch_steps_) : 0.0;
  const double rate = epoch_seconds > 0 ? static_cast<double>(epoch_samples_) / epoch_seconds : 0.0;
  const int64_t remaining = std::max<int64_t>(0, steps_to_run_ - steps_done_);
  const double left = steps_done_ ? elapsed / static_cast<double>(steps_done_) * remaining : NAN;
  std::string text = base::detail::str(prefix_, "epoch ", epoch_ + 1, "/", epochs_, " step ",
                                       step_in_epoch_, "/", steps_per_epoch_, " loss ",
                                       fixed(mean_loss, 4), " ", fixed(rate, 0), " samples/s");
  if (final) text += " took " + format_duration(epoch_seconds);
  text += " left " + format_duration(left);
  return text;
}

void ProgressReporter::show(bool final) {
  last_shown_ = Clock::now();
  const std::string text = line(final);
  if (!in_place_) {
    *out_ << text << std::endl;
    return;
  }
  // Pad over what the previous, possibly longer, line left on screen.
  *out_ << '\r' << text
        << std::string(drawn_width_ > text.size() ? drawn_width_ - text.size() : 0, ' ');
  if (final) {
    *out_ << std::endl;
    drawn_width_ = 0;
  } else {
    *out_ << std::flush;
    drawn_width_ = text.size();
  }
}

}  // namespace ddp::training

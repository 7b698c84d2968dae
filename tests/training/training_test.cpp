// Tests of the training feedback library (ddp/training/*.hpp): progress
// lines on a terminal and in a log, the metrics CSV (including a resumed
// run rewriting the epochs it repeats), and gnuplot curves.

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <thread>

#include "common/error_capture.hpp"
#include "common/file_text.hpp"
#include "common/temporary_directory.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/training/errors.hpp"
#include "ddp/training/metrics_csv.hpp"
#include "ddp/training/plot.hpp"
#include "ddp/training/progress.hpp"

namespace fs = std::filesystem;
using namespace ddp::training;
using ddp::testing::error_of;

namespace {

using ddp::testing::read_file;

std::vector<std::string> lines(const std::string& text) {
  std::vector<std::string> out;
  std::stringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

class TrainingFiles : public ::testing::Test {
 protected:
  std::string path(const std::string& name) const { return dir_.file(name); }
  const ddp::testing::TemporaryDirectory dir_{"ddp-training-"};
};

}  // namespace

TEST(TrainingProgress, LogGetsPlainLinesWithStepLossRateAndTimeLeft) {
  std::ostringstream out;
  ProgressReporter progress(
      0, 3, 4, 12,
      ProgressOptions().in_place(false).log_interval(std::chrono::milliseconds(0)).stream(&out));
  EXPECT_FALSE(progress.in_place());
  progress.begin_epoch(0);
  progress.step(2.0, 64);
  progress.step(1.0, 64);
  progress.message("hello");
  progress.step(0.5, 64);
  progress.step(0.5, 64);
  const EpochProgress done = progress.end_epoch();
  EXPECT_EQ(done.epoch, 0);
  EXPECT_EQ(done.steps, 4);
  EXPECT_DOUBLE_EQ(done.mean_loss, 1.0);
  EXPECT_GT(done.samples_per_s, 0);
  EXPECT_EQ(out.str().find('\r'), std::string::npos);
  const auto shown = lines(out.str());
  ASSERT_EQ(shown.size(), 6u) << out.str();  // 4 steps, the message, the epoch's end.
  EXPECT_TRUE(std::regex_match(
      shown[0], std::regex(R"(\[rank 0\] epoch 1/3 step 1/4 loss 2\.0000 \d+ samples/s left \S+)")))
      << shown[0];
  EXPECT_NE(shown[1].find("step 2/4 loss 1.5000"), std::string::npos) << shown[1];
  EXPECT_EQ(shown[2], "[rank 0] hello");
  EXPECT_TRUE(std::regex_match(
      shown[5],
      std::regex(R"(\[rank 0\] epoch 1/3 step 4/4 loss 1\.0000 \d+ samples/s took \S+ left \S+)")))
      << shown[5];
}

TEST(TrainingProgress, LogIntervalThrottlesIntermediateLinesButNotTheEpochsEnd) {
  std::ostringstream out;
  ProgressReporter progress(
      0, 1, 100, 100,
      ProgressOptions().in_place(false).log_interval(std::chrono::hours(1)).stream(&out));
  progress.begin_epoch(0);
  for (int i = 0; i < 100; ++i) progress.step(1.0, 1);
  progress.end_epoch();
  const auto shown = lines(out.str());
  ASSERT_EQ(shown.size(), 1u) << out.str();
  EXPECT_NE(shown[0].find("step 100/100"), std::string::npos);
  EXPECT_NE(shown[0].find("left 0s"), std::string::npos) << shown[0];
}

TEST(TrainingProgress, TerminalRedrawsOneLinePerEpochInPlace) {
  std::ostringstream out;
  ProgressReporter progress(
      0, 2, 3, 6,
      ProgressOptions().in_place(true).redraw_interval(std::chrono::milliseconds(0)).stream(&out));
  for (int epoch = 0; epoch < 2; ++epoch) {
    progress.begin_epoch(epoch);
    for (int i = 0; i < 3; ++i) progress.step(1.0, 10);
    progress.end_epoch();
  }
  const std::string text = out.str();
  const auto shown = lines(text);
  ASSERT_EQ(shown.size(), 2u) << text;                       // One screen line per epoch...
  EXPECT_EQ(std::count(text.begin(), text.end(), '\r'), 8);  // ...redrawn 4 times each.
  // What the terminal finally shows: the text after each line's last '\r'.
  EXPECT_NE(shown[0].substr(shown[0].rfind('\r') + 1).find("epoch 1/2 step 3/3"),
            std::string::npos);
  EXPECT_NE(shown[1].substr(shown[1].rfind('\r') + 1).find("epoch 2/2 step 3/3"),
            std::string::npos);
}

TEST(TrainingProgress, ResumedEpochCountsFromItsFirstStepAndOtherRanksOnlyPrintMessages) {
  std::ostringstream zero, one;
  ProgressReporter first(
      0, 5, 10, 4,
      ProgressOptions().in_place(false).log_interval(std::chrono::milliseconds(0)).stream(&zero));
  first.begin_epoch(2, 6);
  first.step(1.0, 1);
  EXPECT_NE(zero.str().find("epoch 3/5 step 7/10"), std::string::npos) << zero.str();

  ProgressReporter second(
      1, 5, 10, 4,
      ProgressOptions().in_place(false).log_interval(std::chrono::milliseconds(0)).stream(&one));
  second.begin_epoch(0);
  second.step(1.0, 1);
  second.end_epoch();
  EXPECT_EQ(one.str(), "");
  second.message("shard ready");
  EXPECT_EQ(one.str(), "[rank 1] shard ready\n");
  EXPECT_EQ(second.prefix(), "[rank 1] ");
}

TEST(TrainingProgress, DurationsAndBadArguments) {
  EXPECT_EQ(format_duration(0.4), "0s");
  EXPECT_EQ(format_duration(59), "59s");
  EXPECT_EQ(format_duration(61), "1m01s");
  EXPECT_EQ(format_duration(3725), "1h02m");
  EXPECT_EQ(format_duration(NAN), "?");
  EXPECT_THROW(ProgressReporter(0, 0, 1, 1), ddp::ConfigError);
  try {
    ProgressReporter(0, 1, 0, 1);
    FAIL() << "no ConfigError";
  } catch (const ddp::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("steps_per_epoch is 0"), std::string::npos) << e.what();
  }
  try {
    ProgressReporter(0, 1, 1, 1, ProgressOptions().log_interval(std::chrono::milliseconds(-5)));
    FAIL() << "no ConfigError";
  } catch (const ddp::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("must be 0 or more (got 200 ms and -5 ms)"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(TrainingFiles, MetricsCsvWritesHeaderAndRowsAndReadsThemBack) {
  const std::string csv = path("sub/dir/metrics.csv");  // Directories are created.
  MetricsCsv metrics(csv);
  metrics.append({1, 0.5, 0.8125, 1234.56, 10.25});
  metrics.append({2, 0.25, std::nullopt, 1300, 9.5});
  EXPECT_EQ(read_file(csv),
            "epoch,loss,accuracy,samples_per_s,seconds\n"
            "1,0.500000,0.812500,1234.6,10.250\n"
            "2,0.250000,,1300.0,9.500\n");
  const auto rows = read_metrics_csv(csv);
  ASSERT_EQ(rows.size(), 2u);
  EXPECT_EQ(rows[1].epoch, 2);
  EXPECT_DOUBLE_EQ(rows[0].accuracy.value(), 0.8125);
  EXPECT_FALSE(rows[1].accuracy.has_value());
  EXPECT_DOUBLE_EQ(rows[1].seconds, 9.5);
}

TEST_F(TrainingFiles, ResumedRunKeepsCompletedEpochsAndRewritesTheRest) {
  const std::string csv = path("metrics.csv");
  {
    MetricsCsv before_crash(csv);
    for (int64_t epoch = 1; epoch <= 3; ++epoch)
      before_crash.append({epoch, 1.0 / epoch, 0.5, 1, 1});
  }
  MetricsCsv resumed(csv, /*completed_epochs=*/2);  // Epoch 3's row predates the snapshot's state.
  resumed.append({3, 0.125, 0.75, 1, 1});
  const auto rows = read_metrics_csv(csv);
  ASSERT_EQ(rows.size(), 3u);
  EXPECT_EQ(rows[2].epoch, 3);
  EXPECT_DOUBLE_EQ(rows[2].loss, 0.125);
  EXPECT_DOUBLE_EQ(rows[1].loss, 0.5);
  MetricsCsv fresh(csv);  // A fresh run starts the file again.
  EXPECT_TRUE(read_metrics_csv(csv).empty());
}

TEST_F(TrainingFiles, MalformedMetricsAreNamedByFileAndLine) {
  // bad.csv, holding `text`.
  auto bad = [&](const std::string& text) {
    std::ofstream(path("bad.csv")) << text;
    return path("bad.csv");
  };
  const std::string header = "epoch,loss,accuracy,samples_per_s,seconds\n";
  EXPECT_NE(error_of<ddp::MetricsError>([&] {
              read_metrics_csv(bad("a,b\n"));
            }).find("is not a metrics file: its first line is 'a,b'"),
            std::string::npos);
  EXPECT_NE(error_of<ddp::MetricsError>([&] {
              read_metrics_csv(bad(header + "1,2,3\n"));
            }).find("line 2 has 3 fields"),
            std::string::npos);
  EXPECT_NE(error_of<ddp::MetricsError>([&] {
              read_metrics_csv(bad(header + "1,x,,1,1\n"));
            }).find("the loss is 'x'"),
            std::string::npos);
  EXPECT_NE(error_of<ddp::MetricsError>([&] {
              read_metrics_csv(bad(header + "1.5,1,,1,1\n"));
            }).find("not a whole number"),
            std::string::npos);
  EXPECT_THROW(read_metrics_csv(path("missing.csv")), ddp::MetricsError);
  EXPECT_THROW(MetricsCsv(path("bad.csv"), 1), ddp::MetricsError);  // Resuming into a foreign file.
}

TEST_F(TrainingFiles, PlotWritesAPngWhenGnuplotIsInstalled) {
  try {
    require_gnuplot();
  } catch (const ddp::PlotError& e) {
    GTEST_SKIP() << e.what();
  }
  const std::string csv = path("m.csv");
  {
    MetricsCsv metrics(csv);
    metrics.append({1, 0.6, 0.80, 1000, 10});
    metrics.append({2, 0.4, 0.86, 1000, 10});
    metrics.append({3, 0.3, 0.89, 1000, 10});
  }
  const std::string png = path("plots/curves.png");
  plot_loss_accuracy(csv, png, PlotOptions().title("it's a test"));  // A quote in the title.
  const std::string bytes = read_file(png);
  ASSERT_GT(bytes.size(), 1000u);
  EXPECT_EQ(bytes.substr(0, 8), std::string("\x89PNG\r\n\x1a\n", 8));

  MetricsCsv single(path("one.csv"));  // One epoch, no accuracy: still a picture.
  single.append({1, 0.6, std::nullopt, 1000, 10});
  plot_loss_accuracy(path("one.csv"), path("one.png"));
  EXPECT_EQ(read_file(path("one.png")).substr(0, 4), "\x89PNG");
}

TEST_F(TrainingFiles, PlotErrorsSayWhatToDo) {
  MetricsCsv metrics(path("m.csv"));
  try {
    plot_loss_accuracy(path("m.csv"), path("x.png"));
    FAIL() << "no PlotError for an empty CSV";
  } catch (const ddp::PlotError& e) {
    EXPECT_NE(std::string(e.what()).find("has no epochs yet"), std::string::npos) << e.what();
  }
  metrics.append({1, 0.5, 0.5, 1, 1});
  try {
    plot_loss_accuracy(path("m.csv"), path("x.png"), PlotOptions().gnuplot("/nonexistent/gnuplot"));
    FAIL() << "no PlotError without gnuplot";
  } catch (const ddp::PlotError& e) {
    EXPECT_NE(std::string(e.what()).find("'/nonexistent/gnuplot' was not found"),
              std::string::npos);
    EXPECT_NE(std::string(e.what()).find("apt-get install gnuplot-nox"), std::string::npos)
        << e.what();
  }
  EXPECT_FALSE(fs::exists(path("x.png")));
  // A "gnuplot" that fails: its exit status and output are quoted.
  const std::string fake = path("fake-gnuplot");
  std::ofstream(fake) << "#!/bin/sh\necho 'line 3: unknown terminal type' >&2\nexit 1\n";
  fs::permissions(fake, fs::perms::owner_all);
  try {
    plot_loss_accuracy(path("m.csv"), path("x.png"), PlotOptions().gnuplot(fake));
    FAIL() << "no PlotError for a failing gnuplot";
  } catch (const ddp::PlotError& e) {
    EXPECT_NE(std::string(e.what()).find("(exit 1): line 3: unknown terminal type"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(plot_loss_accuracy(path("m.csv"), path("x.png"), PlotOptions().width(0)),
               ddp::ConfigError);
}

#pragma once

// The command-line flags every example shares, so that each example file
// shows only what is particular to it.

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>

#include "ddp/data/fashion_mnist.hpp"
#include "ddp/training/errors.hpp"
#include "ddp/training/plot.hpp"

namespace ddp::examples {

/// Flags shared by the examples (each example adds its own).
struct CommonOptions {
  int64_t epochs = 5;
  int64_t max_steps = 0;  // 0: no limit.
  uint64_t seed = 0;
  std::string data_dir = ddp::data::FashionMnist::kDefaultRoot;
  std::string snapshot_dir;
  int64_t save_every_steps = 0;   // 0: not by steps.
  int64_t save_every_epochs = 1;  // 0: not by epochs.
  std::string metrics_csv;
  std::string plot;
  std::string device = "auto";  // auto, cpu or cuda (common/device.hpp)
};

/// Adds --epochs, --max-steps, --seed, --device, --snapshot-dir,
/// --save-every-steps, --save-every-epochs, --metrics-csv, --plot and, for
/// examples that read a data set, --data-dir.
inline void add_common_options(CLI::App& app, CommonOptions& o, bool reads_data) {
  app.add_option("--epochs", o.epochs, "epochs to train")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 30))
      ->capture_default_str();
  app.add_option("--max-steps", o.max_steps,
                 "stop after this many steps in all (0: no limit); a short slice for tests")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--seed", o.seed, "seed of the weights and of the shuffling")
      ->capture_default_str();
  app.add_option("--device", o.device,
                 "where to train: auto (the GPU where CUDA is available, else the CPU), cpu, or "
                 "cuda (an error without CUDA); a GPU is cuda:LOCAL_RANK, one per process")
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  if (reads_data) {
    app.add_option("--data-dir", o.data_dir,
                   "directory with the idx files of Fashion-MNIST or MNIST (gzipped or not)")
        ->capture_default_str();
  }
  app.add_option("--snapshot-dir", o.snapshot_dir,
                 "keep snapshots here and resume from the newest one at start-up");
  app.add_option("--save-every-steps", o.save_every_steps,
                 "with --snapshot-dir: a snapshot every N steps (0: off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--save-every-epochs", o.save_every_epochs,
                 "with --snapshot-dir: a snapshot every N epochs (0: off)")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--metrics-csv", o.metrics_csv,
                 "write epoch,loss,accuracy,samples_per_s,seconds rows here");
  // Checked while parsing: a missing gnuplot fails before any training.
  auto gnuplot_installed = [](std::string&) -> std::string {
    try {
      ddp::training::require_gnuplot();
      return "";
    } catch (const ddp::PlotError& e) {
      return e.what();
    }
  };
  app.add_option("--plot", o.plot,
                 "draw loss and accuracy curves into this PNG with gnuplot (without --metrics-csv, "
                 "the CSV goes next to it)")
      ->check(CLI::Validator(gnuplot_installed, "FILE.png", "gnuplot"));
}

}  // namespace ddp::examples

// snapshot_bench: benchmarks/snapshot_bench.sh's program (#47 point 5). For
// models of about 10 MB, 100 MB and 1 GB of state (four square Linear layers
// and SGD's momentum buffers, half the bytes each), one process: how long
// training stops per save, SnapshotManager::save() against save_async() (the
// first save_async apart: it allocates the staging buffer); how long the
// background write takes; and a training step's time while that write runs
// against without one. After a warm-up save of each kind, the rounds
// interleave save() and save_async() so that both meet the same disk and
// page cache. Prints one table line per size.

#include <torch/torch.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "ddp/comm/init.hpp"
#include "ddp/snapshot.hpp"
#include "timing.hpp"

namespace {

namespace fs = std::filesystem;
using ddp_bench::Clock;
using ddp_bench::median;

constexpr int kLayers = 4;
constexpr int64_t kBatch = 16;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Four square Linear layers (no bias) with tanh between them, SGD with
// momentum over them, and the training state that points at both.
struct Trainer {
  explicit Trainer(int64_t width) {
    torch::manual_seed(1);
    for (int k = 0; k < kLayers; ++k) {
      if (k > 0) layers->push_back(torch::nn::Functional(torch::tanh));
      layers->push_back(torch::nn::Linear(torch::nn::LinearOptions(width, width).bias(false)));
    }
    optimizer = std::make_unique<torch::optim::SGD>(layers->parameters(),
                                                    torch::optim::SGDOptions(1e-4).momentum(0.9));
    input = torch::randn({kBatch, width});
    state.model = layers.ptr().get();
    state.optimizer = optimizer.get();
    step();  // the momentum buffers exist from here on
  }
  void step() {
    optimizer->zero_grad();
    layers->forward(input).pow(2).mean().backward();
    optimizer->step();
    ++state.counters["global_step"];
  }
  double timed_step_ms() {
    const auto start = Clock::now();
    step();
    return seconds_since(start) * 1e3;
  }
  int64_t state_bytes() const {
    int64_t bytes = 0;
    for (const auto& p : layers->parameters()) bytes += 2 * p.numel() * 4;  // weight, momentum
    return bytes;
  }

  torch::nn::Sequential layers;
  std::unique_ptr<torch::optim::SGD> optimizer;
  torch::Tensor input;
  ddp::snapshot::TrainingState state;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("snapshot_bench: the stop per save, save() against save_async()");
  std::vector<double> sizes_mb = {10, 100, 1000};
  std::string directory = "/tmp/ddp-snapshot-bench";
  int repeats = 3, steps = 5, threads = 0;
  app.add_option("--sizes-mb", sizes_mb, "state sizes (MB, 1e6 bytes)")->delimiter(',');
  app.add_option("--dir", directory, "where the snapshots go (a real disk; removed after)");
  app.add_option("--repeats", repeats, "saves of each kind per size")->check(CLI::PositiveNumber);
  app.add_option("--steps", steps, "steps timed without a write")->check(CLI::PositiveNumber);
  app.add_option("--threads", threads, "intra-op threads of the training step (0: LibTorch's)");
  CLI11_PARSE(app, argc, argv);
  if (threads > 0) at::set_num_threads(threads);
  auto group = ddp::init(ddp::InitOptions(), ddp::EnvironmentMap{});
  std::printf("intra-op threads: %d\n", at::get_num_threads());

  std::printf("%-8s %-10s %-11s %-11s %-10s %-11s %-8s %-11s %s\n", "state", "sync save",
              "async stop", "async stop", "stop/sync", "background", "step", "step while",
              "slowdown (steps)");
  std::printf("%-8s %-10s %-11s %-11s %-10s %-11s %-8s %-11s\n", "MB", "s", "1st, ms", "ms", "",
              "write s", "ms", "writing ms");
  for (double size_mb : sizes_mb) {
    const int64_t width =
        std::llround(std::sqrt(size_mb * 1e6 / (2.0 * 4 * kLayers)));  // weight + momentum
    Trainer trainer(width);
    fs::remove_all(directory);
    ddp::snapshot::SnapshotManager snapshots(ddp::snapshot::SnapshotOptions(directory).keep_last(2),
                                             group);

    std::vector<double> idle_steps;
    for (int s = 0; s < steps; ++s) idle_steps.push_back(trainer.timed_step_ms());

    // A warm-up round: the first save_async allocates the staging buffer
    // (its stop is reported apart); the first writes touch fresh memory.
    snapshots.save(trainer.state);
    auto start = Clock::now();
    snapshots.save_async(trainer.state);
    const double first_stop_ms = seconds_since(start) * 1e3;
    snapshots.wait();

    // Rounds of one save() and one save_async() with nothing training
    // during the write, interleaved so that both see the same disk and page
    // cache.
    std::vector<double> sync_s, stop_ms, write_s;
    for (int r = 0; r < repeats; ++r) {
      trainer.step();
      start = Clock::now();
      snapshots.save(trainer.state);  // training stopped for the whole write
      sync_s.push_back(seconds_since(start));
      trainer.step();
      start = Clock::now();
      snapshots.save_async(trainer.state);
      stop_ms.push_back(seconds_since(start) * 1e3);
      const auto returned = Clock::now();
      snapshots.wait();
      write_s.push_back(seconds_since(returned));
    }
    std::vector<double> busy_steps;  // steps that began while the thread wrote
    for (int r = 0; r < repeats; ++r) {
      snapshots.save_async(trainer.state);
      while (snapshots.save_in_flight()) busy_steps.push_back(trainer.timed_step_ms());
      snapshots.wait();
    }
    fs::remove_all(directory);

    const double sync = median(sync_s), stop = median(stop_ms), step = median(idle_steps);
    const double busy = busy_steps.empty() ? 0 : median(busy_steps);
    const std::string ratio = std::to_string(std::lround(100 * stop / 1e3 / sync)) + "%";
    const std::string slowdown = busy_steps.empty()
                                     ? "-"
                                     : std::to_string(std::lround(100 * (busy / step - 1))) +
                                           "% (" + std::to_string(busy_steps.size()) + ")";
    std::printf("%-8.0f %-10.3f %-11.1f %-11.1f %-10s %-11.3f %-8.1f %-11.1f %s\n",
                trainer.state_bytes() / 1e6, sync, first_stop_ms, stop, ratio.c_str(),
                median(write_s), step, busy, slowdown.c_str());
    std::fflush(stdout);
  }
  return 0;
}

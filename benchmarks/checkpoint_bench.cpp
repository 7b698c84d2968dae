// checkpoint_bench: ddp's side of benchmarks/checkpoint_bench.sh. Exports a
// training state of about SIZE MB (Linear(1024, 1024) layers and SGD
// momentum: 8.4 MB of state each) as torch.save's format and as safetensors,
// imports both back, and prints one line per measurement, median of REPEAT.
//
//   checkpoint_bench --mb 100 --dir /tmp/ckpt --repeat 3

#include <torch/torch.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <vector>

#include "ddp/snapshot/pytorch_checkpoint.hpp"

namespace {

using Clock = std::chrono::steady_clock;

// Each run starts with no dirty pages of an earlier one (sync, untimed), so
// that no write pays for another's writeback.
template <typename F>
double median_ms(int repeat, F&& run) {
  std::vector<double> times;
  for (int i = 0; i < repeat; ++i) {
    ::sync();
    const auto start = Clock::now();
    run();
    times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
  }
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ddp's checkpoint export and import times"};
  int mb = 100, repeat = 3;
  std::string dir = "/tmp/ddp-checkpoint-bench";
  app.add_option("--mb", mb, "about how many MB of state (parameters + momentum)");
  app.add_option("--dir", dir, "where the files go");
  app.add_option("--repeat", repeat, "runs per measurement (the median is printed)");
  CLI11_PARSE(app, argc, argv);

  const int layers = std::max(1, static_cast<int>(std::lround(mb / 8.4)));
  torch::nn::Sequential model;
  for (int i = 0; i < layers; ++i) model->push_back(torch::nn::Linear(1024, 1024));
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  model->forward(torch::randn({4, 1024})).sum().backward();
  optimizer.step();  // momentum buffers exist
  ddp::snapshot::TrainingState state;
  state.model = model.ptr().get();
  state.optimizer = &optimizer;
  double bytes = 0;
  for (const auto& p : model->parameters()) bytes += 2.0 * p.nbytes();  // + momentum
  std::filesystem::create_directories(dir);
  const std::string pt = dir + "/ddp.pt", st = dir + "/ddp.safetensors";

  auto line = [&](const char* what, double ms, double moved) {
    std::printf("ddp %-22s %7.1f MB %9.1f ms %8.0f MB/s\n", what, bytes / 1e6, ms,
                moved / 1e6 / (ms / 1e3));
  };
  const double params = bytes / 2;
  line("export torch", median_ms(repeat, [&] { ddp::snapshot::export_checkpoint(state, pt); }),
       bytes);
  line("export safetensors",
       median_ms(repeat,
                 [&] {
                   ddp::snapshot::export_checkpoint(state, st,
                                                    ddp::snapshot::CheckpointFormat::kSafetensors);
                 }),
       params);
  line("import torch", median_ms(repeat, [&] { ddp::snapshot::import_checkpoint(pt, state); }),
       bytes);
  ddp::snapshot::TrainingState model_only;
  model_only.model = model.ptr().get();
  line("import safetensors",
       median_ms(repeat, [&] { ddp::snapshot::import_checkpoint(st, model_only); }), params);
  return 0;
}

// dcp_bench: ddp's side of benchmarks/dcp_bench.sh. Every rank (ddprun)
// holds its FSDP shard of a model of about SIZE MB of state (Linear(1024,
// 1024) layers, a unit each, with AdamW's two moments: 12.6 MB each) and
// saves it as PyTorch's Distributed Checkpoint, then loads it back; rank 0
// prints one line per measurement, the median of REPEAT, each run after a
// barrier and an untimed sync.
//
//   ddprun --standalone --nproc-per-node 2 dcp_bench --mb 100 --dir /var/tmp/dcp --repeat 3

#include <torch/torch.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <vector>

#include "ddp/ddp.hpp"
#include "ddp/snapshot/distributed_checkpoint.hpp"
#include "timing.hpp"

namespace {

using Clock = std::chrono::steady_clock;

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ddp's DCP save and load times"};
  int mb = 100, repeat = 3;
  std::string dir = "/var/tmp/ddp-dcp-bench/ddp";
  app.add_option("--mb", mb, "about how many MB of state (parameters + AdamW's moments)");
  app.add_option("--dir", dir, "the checkpoint's directory");
  app.add_option("--repeat", repeat, "runs per measurement (the median is printed)");
  CLI11_PARSE(app, argc, argv);

  auto group = ddp::init(ddp::InitOptions().backend("gloo"));
  const int layers = std::max(1, static_cast<int>(std::lround(mb / 12.6)));
  torch::manual_seed(0);
  torch::nn::Sequential net;
  for (int i = 0; i < layers; ++i) net->push_back(torch::nn::Linear(1024, 1024));
  ddp::FullyShardedDataParallel model(net, group);
  torch::optim::AdamW optimizer(model->parameters(), torch::optim::AdamWOptions(1e-3));
  optimizer.zero_grad();
  model->forward(torch::randn({4, 1024})).sum().backward();
  optimizer.step();  // the moments exist
  ddp::FullyShardedState sharded(model, optimizer);
  ddp::snapshot::TrainingState state;
  state.model = model->module().get();
  state.fully_sharded = &sharded;
  double bytes = 0;
  for (const auto& p : net->parameters()) bytes += 3.0 * p.nbytes();

  auto median_ms = [&](const auto& run) {
    std::vector<double> times;
    for (int i = 0; i < repeat; ++i) {
      ::sync();
      group->barrier();
      const auto start = Clock::now();
      run();
      group->barrier();
      times.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    }
    return ddp_bench::median(times);
  };
  const double save = median_ms([&] { ddp::snapshot::save_distributed_checkpoint(dir, state); });
  const double load = median_ms([&] { ddp::snapshot::load_distributed_checkpoint(dir, state); });
  if (group->rank() == 0) {
    for (const auto& [what, ms] : {std::pair{"save", save}, std::pair{"load", load}}) {
      std::printf("ddp %-22s %7.1f MB %9.1f ms %8.0f MB/s\n", what, bytes / 1e6, ms,
                  bytes / 1e6 / (ms / 1e3));
    }
  }
  return 0;
}

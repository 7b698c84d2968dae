// The torchrun tutorial's toy trainer in C++: Linear(20, 1) on 2048 random
// samples, batch 32 per rank, SGD lr 1e-3, with snapshots and automatic
// resume, so that ddprun can restart it after a failure.
//
//   ddprun --standalone --nproc-per-node 2 --max-restarts 3 \
//       build/bin/example_toy_trainer --epochs 5 --snapshot-dir /tmp/toy

#include <CLI/CLI.hpp>
#include <torch/torch.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <thread>

#include "ddp/data/distributed_sampler.hpp"
#include "ddp/ddp.hpp"
#include "ddp/error_file.hpp"
#include "ddp/snapshot.hpp"

namespace {

struct Options {
  int epochs = 5;
  int64_t max_steps = -1;
  uint64_t seed = 0;
  int64_t batch_size = 32;
  int64_t samples = 2048;
  std::string snapshot_dir;
  int64_t save_every_steps = 0;  // 0: at the end of every epoch
  int step_delay_ms = 0;
};

// FNV-1a over the parameters' bytes: equal digests mean bit-identical.
std::string digest(const std::vector<torch::Tensor>& tensors) {
  uint64_t hash = 1469598103934665603ull;
  for (const auto& t : tensors) {
    auto bytes = t.contiguous();
    const auto* p = static_cast<const unsigned char*>(bytes.data_ptr());
    for (int64_t i = 0; i < bytes.numel() * bytes.element_size(); ++i) {
      hash = (hash ^ p[i]) * 1099511628211ull;
    }
  }
  char text[17];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(hash));
  return text;
}

int train(const Options& o) {
  auto group = ddp::init(ddp::InitOptions().backend("gloo"));
  const int rank = group->rank();
  // The tutorial's dataset: the same random samples on every rank.
  torch::manual_seed(o.seed);
  torch::Tensor inputs = torch::rand({o.samples, 20});
  torch::Tensor targets = torch::rand({o.samples, 1});
  ddp::DistributedDataParallel model(torch::nn::Linear(20, 1), group);
  torch::optim::SGD optimizer(model->parameters(), 1e-3);
  ddp::data::DistributedSampler sampler(o.samples, group->size(), rank,
                                        ddp::data::DistributedSamplerOptions().seed(o.seed));

  ddp::TrainingState state;
  state.model = model->module().get();
  state.optimizer = &optimizer;
  std::unique_ptr<ddp::SnapshotManager> snapshots;
  if (!o.snapshot_dir.empty()) {
    snapshots = std::make_unique<ddp::SnapshotManager>(group, ddp::SnapshotOptions(o.snapshot_dir));
    if (snapshots->resume(state) && rank == 0) {
      std::cout << "resumed at epoch " << state.epoch << ", step " << state.step_in_epoch
                << std::endl;
    }
  }
  std::cout << "pid " << getpid() << std::endl;
  int64_t global_step = state.counters["global_step"];
  float loss_value = 0;
  for (int64_t epoch = state.epoch; epoch < o.epochs; ++epoch) {
    const int64_t first_step = epoch == state.epoch ? state.step_in_epoch : 0;
    sampler.restore(epoch, first_step * o.batch_size);
    for (int64_t step = first_step;; ++step) {
      std::vector<int64_t> batch = sampler.next(o.batch_size);
      if (batch.empty() || global_step == o.max_steps) break;
      torch::Tensor index = torch::tensor(batch, torch::kLong);
      optimizer.zero_grad();
      torch::Tensor loss =
          torch::mse_loss(model->forward(inputs.index_select(0, index)), targets.index_select(0, index));
      loss.backward();
      optimizer.step();
      loss_value = loss.item<float>();
      ++global_step;
      std::cout << "epoch " << epoch << " step " << global_step << " loss " << loss_value << std::endl;
      const bool epoch_done = sampler.position() == sampler.shard_size();
      if (snapshots && (o.save_every_steps ? global_step % o.save_every_steps == 0 : epoch_done)) {
        state.epoch = epoch_done ? epoch + 1 : epoch;
        state.step_in_epoch = epoch_done ? 0 : step + 1;
        state.counters["global_step"] = global_step;
        snapshots->save(state);
      }
      if (o.step_delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(o.step_delay_ms));
    }
    if (global_step == o.max_steps) break;
  }
  if (rank == 0) {
    std::cout << "params-digest=" << digest(model->parameters()) << std::endl;
    std::cout << "final loss=" << loss_value << std::endl;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"The torchrun tutorial's toy trainer with snapshots and automatic resume.",
               "example_toy_trainer"};
  Options o;
  app.add_option("--epochs", o.epochs, "epochs to train")->check(CLI::Range(1, 1000000));
  app.add_option("--max-steps", o.max_steps, "stop after this many steps (a short slice)");
  app.add_option("--seed", o.seed, "seed of the data, the weights and the shuffling");
  app.add_option("--batch-size", o.batch_size, "samples per rank and step")->check(CLI::Range(1, 1 << 20));
  app.add_option("--snapshot-dir", o.snapshot_dir, "keep snapshots here and resume from them");
  app.add_option("--save-every-steps", o.save_every_steps, "snapshot every N steps (0: every epoch)");
  app.add_option("--step-delay-ms", o.step_delay_ms, "sleep after each step (for tests)");
  CLI11_PARSE(app, argc, argv);
  try {
    at::set_num_threads(1);
    return train(o);
  } catch (const std::exception& e) {
    ddp::recordError(e);
    std::cerr << "error: " << e.what() << std::endl;
    return static_cast<int>(ddp::exitCodeFor(e));
  }
}

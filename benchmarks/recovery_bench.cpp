// recovery_bench: ddp's side of benchmarks/recovery_bench.sh, which times
// how long a job takes to come back after one worker is SIGKILLed: with
// ddprun's disk recovery (every worker restarted, the snapshot reloaded)
// and its memory recovery (the lost worker replaced alone, the survivors'
// last commit broadcast to it), beside torchrun restarting the same
// training in Python (pytorch_recovery_bench.py).
//
//   ddprun --standalone --nproc-per-node 2 --max-restarts 1 --recovery memory
//       build/bin/recovery_bench --model convnet --commit-every 10 --kill-at 25
//   (one command line)
//
// Every rank prints `pid P rank R round G` when it (re)starts training and
// `step S round G rank R` after every step; G is 0 until the first failure
// and 1 after it, for the survivors too. With --kill-at K, rank 1 SIGKILLs
// itself right after step K in round 0, so the kill falls at the same
// point in every run and on both sides.

#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <iostream>
#include <optional>
#include <thread>

#include "common/models.hpp"
#include "ddp/data/distributed_sampler.hpp"
#include "ddp/data/fashion_mnist.hpp"
#include "ddp/ddp.hpp"
#include "ddp/elastic.hpp"
#include "ddp/snapshot.hpp"

namespace {

struct Options {
  std::string model = "linear";
  int64_t steps = 40;
  int64_t batch = 0;  // 0: the model's default (32 linear, 100 convnet)
  std::string data_dir = ddp::data::FashionMnist::kDefaultRoot;
  uint64_t seed = 0;
  int64_t commit_every = 0;  // memory: commit every N steps
  std::string snapshot_dir;  // disk: a snapshot every --save-every steps
  int64_t save_every = 10;
  int64_t kill_at = 0;
  int64_t lead_ms = 0;  // sleep after each step before the kill (round 0)
};

int run(Options o) {
  const bool linear = o.model == "linear";
  if (o.batch == 0) o.batch = linear ? 32 : 100;
  at::set_num_threads(1);  // One intra-op thread per rank, as the Python side.

  torch::manual_seed(static_cast<int64_t>(o.seed));
  torch::Tensor inputs, targets;
  std::shared_ptr<torch::nn::Module> module;
  torch::nn::AnyModule net;
  double lr = 0;
  if (linear) {  // the tutorial's 2048 (rand(20), rand(1)) pairs
    inputs = torch::rand({2048, 20});
    targets = torch::rand({2048, 1});
    torch::nn::Linear layer(20, 1);
    module = layer.ptr();
    net = torch::nn::AnyModule(layer);
    lr = 1e-3;
  } else {
    ddp::data::FashionMnist train(o.data_dir);
    inputs = train.images();
    targets = train.labels();
    ddp::examples::ConvNet convnet;
    module = convnet.ptr();
    net = torch::nn::AnyModule(convnet);
    lr = 0.01;
  }
  torch::optim::SGD optimizer(module->parameters(), torch::optim::SGDOptions(lr));
  ddp::snapshot::TrainingState state;
  state.model = module.get();
  state.optimizer = &optimizer;
  ddp::elastic::State elastic(state);
  int calls = 0;

  ddp::elastic::run(
      elastic,
      [&](const std::shared_ptr<ddp::ProcessGroup>& group) {
        // Read here, not at start: a hot spare learns its restart count
        // only when it takes a rank (Note [A spare waits for a seat]).
        const char* restarts = std::getenv("TORCHELASTIC_RESTART_COUNT");
        const int round = (restarts ? std::atoi(restarts) : 0) + calls++;
        const int rank = group->rank();
        ddp::DistributedDataParallel model(net, ddp::DistributedDataParallelOptions(), group);
        ddp::data::DistributedSampler sampler(inputs.size(0), group->size(), rank,
                                              ddp::data::DistributedSamplerOptions().seed(o.seed));
        std::optional<ddp::snapshot::SnapshotManager> snapshots;
        if (!o.snapshot_dir.empty()) snapshots.emplace(o.snapshot_dir, group);
        if (elastic.commits() == 0) {  // the job's start; a replacement receives a commit
          if (snapshots) snapshots->resume(state);
          if (o.commit_every > 0) elastic.commit();
        }
        std::cout << "pid " << getpid() << " rank " << rank << " round " << round << std::endl;
        int64_t step = state.counters["global_step"];
        sampler.restore_global(state.epoch, state.samples_in_epoch);
        while (step < o.steps) {
          std::vector<int64_t> batch = sampler.next(o.batch);
          if (batch.empty()) {
            sampler.set_epoch(sampler.epoch() + 1);
            continue;
          }
          torch::Tensor index = torch::tensor(batch, torch::kLong);
          optimizer.zero_grad();
          torch::Tensor out = model->forward(inputs.index_select(0, index));
          torch::Tensor target = targets.index_select(0, index);
          (linear ? torch::mse_loss(out, target) : torch::cross_entropy_loss(out, target))
              .backward();
          optimizer.step();
          ++step;
          std::cout << "step " << step << " round " << round << " rank " << rank << std::endl;
          const bool epoch_done = sampler.position() == sampler.shard_size();
          state.epoch = epoch_done ? sampler.epoch() + 1 : sampler.epoch();
          state.samples_in_epoch = epoch_done ? 0 : sampler.global_position();
          state.counters["global_step"] = step;
          if (snapshots && step % o.save_every == 0) snapshots->save(state);
          if (o.commit_every > 0 && step % o.commit_every == 0) elastic.commit();
          if (round == 0 && step < o.kill_at && o.lead_ms > 0) {
            std::this_thread::sleep_for(std::chrono::milliseconds(o.lead_ms));
          }
          if (rank == 1 && round == 0 && step == o.kill_at) ::kill(::getpid(), SIGKILL);
        }
      },
      ddp::elastic::RunOptions().init(ddp::InitOptions().backend("gloo")));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Trains under ddprun and fails on purpose, to time recovery (run the script)."};
  Options o;
  app.add_option("--model", o.model, "linear (the torchrun tutorial's toy) or convnet")
      ->check(CLI::IsMember({"linear", "convnet"}));
  app.add_option("--steps", o.steps, "steps in all")->check(CLI::PositiveNumber);
  app.add_option("--batch", o.batch, "batch per rank (default 32 linear, 100 convnet)");
  app.add_option("--data-dir", o.data_dir, "directory of the Fashion-MNIST idx files");
  app.add_option("--seed", o.seed, "seed of the data, the model and the shuffling");
  app.add_option("--commit-every", o.commit_every, "commit in memory every N steps (0: never)");
  app.add_option("--snapshot-dir", o.snapshot_dir, "save a snapshot every --save-every steps");
  app.add_option("--save-every", o.save_every, "steps between snapshots")
      ->check(CLI::PositiveNumber);
  app.add_option("--lead-ms", o.lead_ms,
                 "sleep after each step before the kill (round 0), so that what starts beside "
                 "the job (a hot spare) is ready by then");
  app.add_option("--kill-at", o.kill_at, "rank 1 SIGKILLs itself after this step in round 0");
  CLI11_PARSE(app, argc, argv);
  try {
    return run(o);
  } catch (const ddp::Error& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return static_cast<int>(ddp::exit_code_for(e));
  }
}

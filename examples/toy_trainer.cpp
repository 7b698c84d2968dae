// The torchrun tutorial's toy trainer in C++: Linear(20, 1) on 2048 random
// samples, batch 32 per rank, SGD lr 1e-3 (--momentum), with snapshots
// every N epochs (or steps) and automatic resume, so that ddprun can restart
// it after a failure and it continues where the last snapshot left off.
//
//   ddprun --standalone --nproc-per-node 2 --max-restarts 3 \
//       build/bin/example_toy_trainer --epochs 5 --snapshot-dir /tmp/toy
//
// The data are random (generated from --seed, like the tutorial's), so
// there is no --data-dir and no test set: the final line has no accuracy.
// With --device cuda (or auto on a machine with CUDA) each rank trains on
// its GPU, cuda:LOCAL_RANK, and the job's backend is `auto` (NCCL for the
// gradients) instead of Gloo.
// Every rank traces each step ("epoch E step S loss L"; the tests kill a
// worker at a given step); --no-trace-steps leaves only rank 0's progress.
//
// With --commit-every N it commits its state in memory every N steps, and
// under `ddprun --recovery memory` a lost worker is replaced alone: the
// others keep their processes, roll back to the last commit and hand it to
// the replacement (ddp/elastic.hpp).
//
// With --zero-stage 1 or 2 the same SGD runs as a ZeroRedundancyOptimizer
// (stage 1 beside DDP, stage 2 on the bare model); its shards are committed
// too, each kept by its rank and the next (Note [Sharded state in memory] in
// ddp/elastic/state.hpp). --momentum gives SGD state worth sharding. With
// --shard full the model is a FullyShardedDataParallel: its parameters and
// SGD state are sharded, committed and recovered the same way; --shard
// hybrid shards it within rows of 2 ranks, each row holding a copy.

#include <signal.h>
#include <torch/torch.h>
#include <unistd.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <regex>
#include <sstream>
#include <thread>

#include "common/cli.hpp"
#include "common/device.hpp"
#include "common/distributed_eval.hpp"
#include "common/metrics_output.hpp"
#include "common/periodic_snapshots.hpp"
#include "common/run_example.hpp"
#include "common/sample_log.hpp"
#include "ddp/data/distributed_sampler.hpp"
#include "ddp/ddp.hpp"
#include "ddp/elastic.hpp"
#include "ddp/training/progress.hpp"

namespace {

struct Options : ddp::examples::CommonOptions {
  int64_t batch_size = 32;
  int64_t samples = 2048;
  bool trace_steps = true;
  bool trace_samples = false;
  std::string sample_log;  // a directory: each process's samples-<pid>.log
  int step_delay_ms = 0;
  double collective_timeout_s = 1800;  // LibTorch's default for Gloo
  int64_t commit_every = 0;
  std::string kill_at;         // RANK:STEP[,RANK:STEP...]
  std::string kill_in_commit;  // RANK:STEP
  int zero_stage = 0;          // 0: a plain optimizer
  std::string shard = "none";  // full: FullyShardedDataParallel; hybrid: on a DeviceMesh
  double momentum = 0;
};

constexpr double kLearningRate = 1e-3;

torch::optim::SGDOptions sgd_options(const Options& o) {
  return torch::optim::SGDOptions(kLearningRate).momentum(o.momentum);
}

// Points the training state at a generation's sharded optimizer (or FSDP
// state) while it lives, so that no commit or restore follows a dead
// generation's.
class ShardedOptimizerInUse {
 public:
  ShardedOptimizerInUse(ddp::snapshot::TrainingState& state, ddp::ZeroRedundancyOptimizer* zero,
                        ddp::FullyShardedState* fully_sharded)
      : state_(state) {
    state_.zero_optimizer = zero;
    state_.fully_sharded = fully_sharded;
  }
  ~ShardedOptimizerInUse() {
    state_.zero_optimizer = nullptr;
    state_.fully_sharded = nullptr;
  }
  ShardedOptimizerInUse(const ShardedOptimizerInUse&) = delete;
  ShardedOptimizerInUse& operator=(const ShardedOptimizerInUse&) = delete;

 private:
  ddp::snapshot::TrainingState& state_;
};

// --kill-at RANK:STEP[,RANK:STEP...]: each rank named SIGKILLs itself after
// its step (--kill-in-commit: as it enters that step's commit), in the job's
// first run only (TORCHELASTIC_RESTART_COUNT 0), so that tests fail workers
// at exact points.
bool kills_itself_at(const std::string& spec, int rank, int64_t step) {
  if (spec.empty()) return false;
  const char* restarts = std::getenv("TORCHELASTIC_RESTART_COUNT");
  if (restarts != nullptr && std::string(restarts) != "0") return false;
  std::istringstream pairs(spec);
  for (std::string pair; std::getline(pairs, pair, ',');) {
    const auto colon = pair.find(':');
    if (std::stoi(pair.substr(0, colon)) == rank && std::stoll(pair.substr(colon + 1)) == step) {
      return true;
    }
  }
  return false;
}

// One generation of the job (all of it unless ddprun --recovery memory
// replaces a worker): the loop continues from `state`, wherever a snapshot,
// a commit or the start left it.
void train_generation(const Options& o, const std::shared_ptr<ddp::ProcessGroup>& group,
                      ddp::elastic::State& elastic, ddp::examples::SampleLog& sample_log,
                      torch::nn::Linear& net, torch::optim::SGD& optimizer,
                      const torch::Tensor& inputs, const torch::Tensor& targets) {
  const int rank = group->rank(), world = group->size();
  ddp::snapshot::TrainingState& state = elastic.training();
  // Stage 2 averages the gradients itself, on the bare model.
  ddp::DistributedDataParallel model(nullptr);
  if (o.zero_stage != 2 && o.shard == "none") model = ddp::DistributedDataParallel(net, group);
  std::unique_ptr<ddp::ZeroRedundancyOptimizer> zero;
  if (o.zero_stage > 0) {
    zero = std::make_unique<ddp::ZeroRedundancyOptimizer>(
        net->parameters(), ddp::zero_optimizer<torch::optim::SGD>(sgd_options(o)),
        ddp::ZeroRedundancyOptimizerOptions().stage(o.zero_stage), group);
  }
  // --shard full: FSDP (the whole Linear one unit) over this generation's
  // copy of `net`, whose values a later generation takes from the commit.
  torch::nn::Linear sharded_net(nullptr);
  ddp::FullyShardedDataParallel fsdp(nullptr);
  std::unique_ptr<torch::optim::SGD> shard_optimizer;
  std::unique_ptr<ddp::FullyShardedState> fully_sharded;
  if (o.shard != "none") {
    sharded_net = torch::nn::Linear(20, 1);
    sharded_net->to(net->weight.device());
    {
      torch::NoGradGuard no_grad;
      sharded_net->weight.copy_(net->weight);
      sharded_net->bias.copy_(net->bias);
    }
    // --shard hybrid: rows of 2 ranks each hold the model, sharded within
    // the row (a DeviceMesh made anew with each generation's group).
    auto options = ddp::FullyShardedDataParallelOptions();
    if (o.shard == "hybrid")
      options.device_mesh(std::make_shared<ddp::DeviceMesh>(group, world / 2, 2));
    fsdp = ddp::FullyShardedDataParallel(sharded_net, options, group);
    shard_optimizer = std::make_unique<torch::optim::SGD>(fsdp->parameters(), sgd_options(o));
    fully_sharded = std::make_unique<ddp::FullyShardedState>(fsdp, *shard_optimizer);
  }
  torch::optim::Optimizer& plain = shard_optimizer ? *shard_optimizer : optimizer;
  const ShardedOptimizerInUse in_use(state, zero.get(), fully_sharded.get());
  ddp::data::DistributedSampler sampler(o.samples, world, rank,
                                        ddp::data::DistributedSamplerOptions().seed(o.seed));
  const int64_t steps_per_epoch = (sampler.shard_size() + o.batch_size - 1) / o.batch_size;
  ddp::examples::PeriodicSnapshots snapshots(group, o);
  if (elastic.commits() == 0) {  // the job's start (a replacement receives a commit)
    if (snapshots.resume(state) && rank == 0) {
      std::cout << "resumed at epoch " << state.epoch << ", step " << state.step_in_epoch
                << std::endl;
    }
    // A failure before the first periodic commit rolls back to here.
    if (o.commit_every > 0) elastic.commit();
  } else if (zero || fsdp) {
    elastic.restore();  // the sync could not give this generation's optimizer its shard
  }
  std::cout << "pid " << getpid() << std::endl;
  int64_t global_step = state.counters["global_step"];
  sample_log.generation(rank, world, global_step);
  int64_t steps_to_run = o.epochs * steps_per_epoch - global_step;
  if (o.max_steps > 0) steps_to_run = std::min(steps_to_run, o.max_steps - global_step);
  ddp::training::ProgressReporter progress(
      rank, o.epochs, steps_per_epoch, std::max<int64_t>(0, steps_to_run),
      ddp::training::ProgressOptions().in_place(o.trace_steps ? std::optional<bool>(false)
                                                              : std::nullopt));
  ddp::examples::MetricsOutput metrics(o, rank, state.epoch,
                                       "toy trainer, " + std::to_string(world) + " ranks");

  auto limit_reached = [&] { return o.max_steps > 0 && global_step >= o.max_steps; };
  const torch::Device device = net->weight.device();  // --device's; each batch goes there
  double loss = NAN;
  for (int64_t epoch = state.epoch; epoch < o.epochs && !limit_reached(); ++epoch) {
    // The epoch continues from the samples the whole job consumed, so a
    // job re-formed at another world size neither skips nor repeats any.
    const int64_t consumed = epoch == state.epoch ? state.samples_in_epoch : 0;
    sampler.restore_global(epoch, consumed);
    const int64_t first_step = consumed / (o.batch_size * world);
    progress.begin_epoch(epoch, first_step);
    for (int64_t step = first_step; !limit_reached(); ++step) {
      std::vector<int64_t> batch = sampler.next(o.batch_size);
      if (batch.empty()) break;
      sample_log.batch(epoch, global_step + 1, batch);
      torch::Tensor index = torch::tensor(batch, torch::kLong);
      zero ? zero->zero_grad() : plain.zero_grad();
      const torch::Tensor x = inputs.index_select(0, index).to(device);
      const torch::Tensor y = model ? model->forward(x) : fsdp ? fsdp->forward(x) : net->forward(x);
      torch::Tensor step_loss = torch::mse_loss(y, targets.index_select(0, index).to(device));
      step_loss.backward();
      zero ? zero->step() : static_cast<void>(plain.step());
      ++global_step;
      progress.step(step_loss.item<double>(), static_cast<int64_t>(batch.size()) * world);
      if (o.trace_steps) {
        std::cout << "epoch " << epoch << " step " << global_step << " loss "
                  << step_loss.item<float>() << std::endl;
      }
      if (o.trace_samples) {
        std::cout << "epoch " << epoch << " samples";
        for (int64_t i : batch) std::cout << ' ' << i;
        std::cout << std::endl;
      }
      const bool epoch_done = sampler.position() == sampler.shard_size();
      state.epoch = epoch_done ? epoch + 1 : epoch;
      state.step_in_epoch = epoch_done ? 0 : step + 1;
      state.samples_in_epoch = epoch_done ? 0 : sampler.global_position();
      state.counters["global_step"] = global_step;
      snapshots.after_step(state, epoch_done, /*stopping=*/limit_reached());
      if (o.commit_every > 0 && global_step % o.commit_every == 0) {
        if (kills_itself_at(o.kill_in_commit, rank, global_step)) ::kill(::getpid(), SIGKILL);
        elastic.commit();
        if (o.trace_steps) std::cout << "committed step " << global_step << std::endl;
      }
      if (kills_itself_at(o.kill_at, rank, global_step)) ::kill(::getpid(), SIGKILL);
      if (o.step_delay_ms) std::this_thread::sleep_for(std::chrono::milliseconds(o.step_delay_ms));
    }
    const ddp::training::EpochProgress done = progress.end_epoch();
    loss = ddp::examples::sum_across_ranks(done.mean_loss, *group) / world;
    metrics.record({epoch + 1, loss, std::nullopt, done.samples_per_s, done.seconds});
  }
  const std::string outputs = metrics.finish();
  if (fsdp) {  // the full weights, for the digest: a collective
    const auto full = fsdp->full_parameters();
    torch::NoGradGuard no_grad;
    net->weight.copy_(full["weight"]);
    net->bias.copy_(full["bias"]);
  }
  if (rank == 0) {
    if (!outputs.empty()) progress.message(outputs);
    std::cout << "params-digest=" << ddp::examples::weights_digest(*net) << std::endl;
    std::cout << "final loss=" << loss << std::endl;
  }
}

int train(const Options& o) {
  // The backend depends on the device, so the device (GPU local rank) comes
  // before the group, which elastic::run starts.
  const torch::Device device = ddp::examples::resolve_device(o.device);
  // The tutorial's dataset: the same random samples on every rank (drawn on
  // the CPU, whatever the device, so that every device trains on the same).
  torch::manual_seed(o.seed);
  torch::Tensor inputs = torch::rand({o.samples, 20});
  torch::Tensor targets = torch::rand({o.samples, 1});
  torch::nn::Linear net(20, 1);
  net->to(device);
  torch::optim::SGD optimizer(net->parameters(), sgd_options(o));  // unused under ZeRO
  ddp::snapshot::TrainingState state;
  state.model = net.ptr().get();
  state.optimizer = o.zero_stage == 0 && o.shard == "none" ? &optimizer : nullptr;
  if (o.shard != "none") state.model = nullptr;  // a Linear has no buffers; FSDP's shards hold it
  ddp::elastic::State elastic(state);
  ddp::examples::SampleLog sample_log(o.sample_log);
  ddp::elastic::run(
      elastic,
      [&](const std::shared_ptr<ddp::ProcessGroup>& group) {
        train_generation(o, group, elastic, sample_log, net, optimizer, inputs, targets);
      },
      ddp::elastic::RunOptions().init(
          ddp::InitOptions()
              .backend(device.is_cuda() ? "auto" : "gloo")
              .collective_timeout(
                  std::chrono::milliseconds(static_cast<int64_t>(o.collective_timeout_s * 1000)))));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "The torchrun tutorial's toy trainer (Linear(20,1), 2048 random samples) with\n"
      "snapshots and automatic resume. Run alone, or under ddprun/torchrun.",
      "example_toy_trainer"};
  Options o;
  ddp::examples::add_common_options(app, o, /*reads_data=*/false);
  app.add_option("--batch-size", o.batch_size, "samples per rank and step")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20))
      ->capture_default_str();
  app.add_flag("--trace-steps,!--no-trace-steps", o.trace_steps,
               "print 'epoch E step S loss L' on every rank after every step (default on)");
  app.add_flag("--trace-samples", o.trace_samples,
               "print 'epoch E samples I ...' (the batch's indices) on every rank after every "
               "step (for tests)");
  app.add_option("--sample-log", o.sample_log,
                 "DIR: each process writes the batches it takes (and each generation's rank, "
                 "world size and first step) to DIR/samples-<pid>.log, before each step trains "
                 "(for tests: a record no relay or SIGKILL reorders)")
      ->check(CLI::ExistingDirectory);
  app.add_option("--step-delay-ms", o.step_delay_ms, "sleep after each step (for tests)");
  app.add_option("--collective-timeout", o.collective_timeout_s,
                 "seconds a collective may wait for a peer: a peer that hangs (or is cut off "
                 "without its connections closing) is noticed after this long")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--commit-every", o.commit_every,
                 "commit the training state in memory every N steps (0: never), so that "
                 "ddprun --recovery memory can replace a lost worker without a restart")
      ->check(CLI::NonNegativeNumber);
  app.add_option("--kill-at", o.kill_at,
                 "RANK:STEP[,RANK:STEP...]: each rank named SIGKILLs itself after its step in "
                 "the job's first run (for tests)")
      ->check([](const std::string& v) {
        return std::regex_match(v, std::regex(R"(\d+:\d+(,\d+:\d+)*)"))
                   ? ""
                   : "expected RANK:STEP[,RANK:STEP...]";
      });
  app.add_option("--kill-in-commit", o.kill_in_commit,
                 "RANK:STEP: that rank SIGKILLs itself as it enters the commit of that step, in "
                 "the job's first run (for tests: a failure during a commit)")
      ->check([](const std::string& v) {
        return std::regex_match(v, std::regex(R"(\d+:\d+)")) ? "" : "expected RANK:STEP";
      });
  app.add_option("--zero-stage", o.zero_stage,
                 "0: a plain optimizer beside DDP; 1: a ZeroRedundancyOptimizer beside DDP; 2: "
                 "one that also shards the gradients, on the bare model")
      ->check(CLI::Range(0, 2))
      ->capture_default_str();
  app.add_option("--shard", o.shard,
                 "none: DDP; full: FullyShardedDataParallel, the model's parameters, gradients and "
                 "SGD state sharded across the ranks (committed and recovered in memory like "
                 "ZeRO's); hybrid: the same within rows of 2 ranks, each row a copy (an even "
                 "number of workers)")
      ->check(CLI::IsMember({"none", "full", "hybrid"}))
      ->capture_default_str();
  app.add_option("--momentum", o.momentum, "SGD's momentum (its state is what ZeRO shards)")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (o.shard != "none" && o.zero_stage != 0) {
    std::cerr << "error: --shard " << o.shard << " and --zero-stage " << o.zero_stage
              << " both shard the optimizer; choose one" << std::endl;
    return static_cast<int>(ddp::ExitCode::kConfig);
  }
  at::set_num_threads(1);  // A tiny model: more threads only add overhead.
  return ddp::examples::run_example([&] { return train(o); });
}

// Horovod's PyTorch MNIST example in C++ with ddp's Horovod-style API:
// hvd::init(), a DistributedOptimizer that averages the gradients (fused
// into few all-reduces) before each SGD step, the learning rate scaled by
// the number of ranks after a linear warm-up, and rank 0's weights and
// optimizer state broadcast at the start. On Fashion-MNIST by default.
//
//   ddprun --standalone --nproc-per-node 2 build/bin/example_horovod --epochs 5
//
// (horovodrun -np 2 python pytorch_mnist.py, in Horovod's terms.)
//
// On CUDA (--device cuda, or auto where CUDA is available) each rank trains
// on GPU hvd::local_rank(), as Horovod's torch.cuda.set_device(local_rank),
// and the backend is `auto`: the fused gradients travel over NCCL.

#include <torch/torch.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>

#include "common/cli.hpp"
#include "common/device.hpp"
#include "common/distributed_eval.hpp"
#include "common/metrics_output.hpp"
#include "common/models.hpp"
#include "common/periodic_snapshots.hpp"
#include "common/run_example.hpp"
#include "common/utilization.hpp"
#include "ddp/data/distributed_sampler.hpp"
#include "ddp/data/fashion_mnist.hpp"
#include "ddp/hvd.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"
#include "ddp/training/progress.hpp"

namespace hvd = ddp::hvd;

namespace {

using ddp::data::FashionMnist;

struct Options : ddp::examples::CommonOptions {
  int64_t batch_size = 64;  // per rank
  double lr = 0.01;         // the single-process rate; scaled by the ranks
  double momentum = 0.5;
  int64_t warmup_steps = 100;
};

int train(const Options& o) {
  const auto started = std::chrono::steady_clock::now();
  const torch::Device device = ddp::examples::resolve_device(o.device);  // GPU local rank
  // Gloo on the CPU; on CUDA `auto`, whose NCCL backend the CUDA tensors take.
  auto group = hvd::init(ddp::InitOptions().backend(device.is_cuda() ? "auto" : "gloo"));
  FashionMnist train_set(o.data_dir, FashionMnist::Split::kTrain);
  FashionMnist test_set(o.data_dir, FashionMnist::Split::kTest);
  ddp::data::DistributedSampler sampler(train_set.size().value(), hvd::size(), hvd::rank(),
                                        ddp::data::DistributedSamplerOptions().seed(o.seed));
  const int64_t steps_per_epoch = (sampler.shard_size() + o.batch_size - 1) / o.batch_size;

  torch::manual_seed(o.seed);
  ddp::examples::HorovodNet net;
  net->to(device);
  hvd::DistributedOptimizer optimizer(
      torch::optim::SGD(net->parameters(), torch::optim::SGDOptions(o.lr).momentum(o.momentum)));
  // o.lr -> o.lr * size over the first warm-up steps (Goyal et al.).
  hvd::LearningRateWarmup warmup(optimizer.optimizer(),
                                 hvd::LearningRateWarmupOptions(o.warmup_steps));

  ddp::snapshot::TrainingState state;
  state.model = net.ptr().get();
  state.optimizer = &optimizer.optimizer();
  state.scheduler = &warmup;
  ddp::examples::PeriodicSnapshots snapshots(group, o);
  const bool resumed = snapshots.resume(state);
  // Horovod's start: every rank takes rank 0's weights and optimizer state.
  hvd::broadcast_parameters(*net, 0);
  hvd::broadcast_optimizer_state(optimizer.optimizer(), 0);

  int64_t global_step = state.counters["global_step"];
  int64_t steps_to_run = o.epochs * steps_per_epoch - global_step;
  if (o.max_steps > 0) steps_to_run = std::min(steps_to_run, o.max_steps - global_step);
  ddp::training::ProgressReporter progress(hvd::rank(), o.epochs, steps_per_epoch,
                                           std::max<int64_t>(0, steps_to_run));
  if (resumed && hvd::rank() == 0) {
    progress.message("resumed from " + o.snapshot_dir + " at epoch " +
                     std::to_string(state.epoch + 1) + " step " +
                     std::to_string(state.step_in_epoch) + " (global step " +
                     std::to_string(global_step) + ")");
  }
  progress.message("rank " + std::to_string(hvd::rank()) + " of " + std::to_string(hvd::size()) +
                   " (local " + std::to_string(hvd::local_rank()) + " of " +
                   std::to_string(hvd::local_size()) + "), shard of " +
                   std::to_string(sampler.shard_size()) + " samples, on " + device.str());
  ddp::examples::MetricsOutput metrics(
      o, hvd::rank(), state.epoch,
      "Horovod-style training on Fashion-MNIST, " + std::to_string(hvd::size()) + " ranks");

  ddp::examples::TrainingUtilization utilization(device);
  auto limit_reached = [&] { return o.max_steps > 0 && global_step >= o.max_steps; };
  double loss = NAN, accuracy = NAN;
  for (int64_t epoch = state.epoch; epoch < o.epochs && !limit_reached(); ++epoch) {
    // A new shuffle every epoch, the same on every rank; a resumed epoch
    // continues from the samples the whole job consumed, at any world size.
    const int64_t consumed = epoch == state.epoch ? state.samples_in_epoch : 0;
    sampler.restore_global(epoch, consumed);
    const int64_t first_step = consumed / (o.batch_size * hvd::size());
    progress.begin_epoch(epoch, first_step);
    net->train();
    for (int64_t step = first_step; !limit_reached(); ++step) {
      std::vector<int64_t> batch = sampler.next(o.batch_size);
      if (batch.empty()) break;
      torch::Tensor index = torch::tensor(batch, torch::kLong);
      optimizer.zero_grad();
      torch::Tensor step_loss =
          torch::nll_loss(utilization.forward([&] {
            return net->forward(train_set.images().index_select(0, index).to(device));
          }),
                          train_set.labels().index_select(0, index).to(device));
      step_loss.backward();  // the fused all-reduces start while backward runs
      optimizer.step();      // waits for the averaged gradients, then SGD
      warmup.step();
      ++global_step;
      progress.step(step_loss.item<double>(), static_cast<int64_t>(batch.size()) * hvd::size());
      const bool epoch_done = sampler.position() == sampler.shard_size();
      state.epoch = epoch_done ? epoch + 1 : epoch;
      state.step_in_epoch = epoch_done ? 0 : step + 1;
      state.samples_in_epoch = epoch_done ? 0 : sampler.global_position();
      state.counters["global_step"] = global_step;
      snapshots.after_step(state, epoch_done, /*stopping=*/limit_reached());
    }
    const ddp::training::EpochProgress done = progress.end_epoch();
    utilization.add_epoch(done);
    loss = ddp::examples::sum_across_ranks(done.mean_loss, *group) /
           hvd::size();  // Horovod's metric_average
    accuracy = ddp::examples::sharded_accuracy(net, test_set.images(), test_set.labels(), *group);
    metrics.record({epoch + 1, loss, accuracy, done.samples_per_s, done.seconds});
    if (hvd::rank() == 0) {
      char text[160];
      std::snprintf(text, sizeof(text),
                    "epoch %lld/%lld: train loss %.4f, test accuracy %.2f%%, lr %.3g",
                    static_cast<long long>(epoch + 1), static_cast<long long>(o.epochs), loss,
                    100 * accuracy, optimizer.param_groups()[0].options().get_lr());
      progress.message(text);
    }
  }
  if (std::isnan(accuracy)) {  // Nothing left to train: the snapshot is the result.
    accuracy = ddp::examples::sharded_accuracy(net, test_set.images(), test_set.labels(), *group);
  }
  const std::string outputs = metrics.finish();
  const std::string mfu = utilization.summary(*group);
  if (hvd::rank() == 0) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    char text[200];
    std::snprintf(text, sizeof(text),
                  "done: %lld steps, test accuracy %.2f%%, %.1f s in all; %lld fusion buffers",
                  static_cast<long long>(global_step), 100 * accuracy, seconds,
                  static_cast<long long>(optimizer.stats().buffer_bytes.size()));
    progress.message(text);
    if (!mfu.empty()) progress.message(mfu);
    if (!outputs.empty()) progress.message(outputs);
    std::printf("params-digest=%s\nfinal loss=%.6f accuracy=%.4f\n",
                ddp::examples::weights_digest(*net).c_str(), loss, accuracy);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Horovod's MNIST example with ddp::hvd (DistributedOptimizer, broadcasts,\n"
      "learning-rate warm-up). Run under ddprun, torchrun, mpirun or srun.",
      "example_horovod"};
  Options o;
  ddp::examples::add_common_options(app, o, /*reads_data=*/true);
  app.add_option("--batch-size", o.batch_size, "samples per rank and step")
      ->check(CLI::Range(int64_t{1}, int64_t{60000}))
      ->capture_default_str();
  app.add_option("--lr", o.lr, "single-process SGD learning rate (scaled by the number of ranks)")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--momentum", o.momentum, "SGD momentum")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--warmup-steps", o.warmup_steps,
                 "steps over which the learning rate grows to lr x ranks")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return ddp::examples::run_example([&] { return train(o); });
}

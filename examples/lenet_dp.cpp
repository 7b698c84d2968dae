// LeNet-5 trained with DataParallel: one process, the batch split across
// replicas of the model (one per GPU, or several on the CPU), each replica
// on its own thread, the gradients summed into the one model that Adam
// updates; StepLR decays the learning rate every epoch.
//
//   build/bin/example_lenet_dp --epochs 5 --replicas 2 --plot lenet.png
//
// --device auto (the default) spreads the batch over the GPUs where CUDA is
// available (the first --gpus N of them, all by default), else over
// --replicas CPU replicas; --device cpu stays on the CPU, --device cuda
// insists on the GPUs.
//
// DataParallel is parallelism inside one process: run it alone (or under
// ddprun with one worker); for several processes use example_mnist_ddp.

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
#include "ddp/ddp.hpp"
#include "ddp/parallel/data_parallel.hpp"
#include "ddp/training/progress.hpp"

namespace {

using ddp::data::FashionMnist;

struct Options : ddp::examples::CommonOptions {
  int64_t batch_size = 128;  // split across the replicas
  int gpus = 0;              // on CUDA: the first N GPUs; 0: every visible one
  int replicas = 0;          // on the CPU: N replicas; 0: 2
  double lr = 1e-3;
  double lr_gamma = 0.7;
};

// The replicas' devices: on CUDA one per GPU, cuda:0 to cuda:N-1 (--gpus N;
// 0: every visible GPU); on the CPU --replicas of them (0: 2).
std::vector<torch::Device> replica_devices(const Options& o) {
  if (o.device == "cpu" && o.gpus > 0) {
    throw ddp::ConfigError("--gpus " + std::to_string(o.gpus) +
                           " asks for GPUs, but --device cpu trains on the CPU; drop --gpus "
                           "(--replicas N sets the CPU replicas) or use --device auto.");
  }
  const int visible = torch::cuda::is_available() ? torch::cuda::device_count() : 0;
  if (o.gpus > visible) {
    throw ddp::ConfigError(
        "--gpus " + std::to_string(o.gpus) + " asks for more GPUs than the " +
        std::to_string(visible) + " visible to this process; " +
        (visible > 0 ? "ask for at most " + std::to_string(visible) + " (--gpus 0: all of them)"
                     : std::string("run it where GPUs are visible")) +
        ", or train on CPU replicas with --device cpu --replicas N.");
  }
  const torch::Device device = ddp::examples::resolve_device(o.device, /*local_rank=*/0);
  std::vector<torch::Device> devices;
  if (device.is_cuda()) {
    if (o.replicas > 0) {
      throw ddp::ConfigError("--replicas " + std::to_string(o.replicas) +
                             " counts CPU replicas, but this run trains on the GPUs (--device " +
                             o.device + "); use --gpus " + std::to_string(o.replicas) +
                             " for that many GPUs, or --device cpu for CPU replicas.");
    }
    for (int i = 0; i < (o.gpus > 0 ? o.gpus : visible); ++i)
      devices.emplace_back(torch::kCUDA, static_cast<c10::DeviceIndex>(i));
  } else {
    devices.assign(o.replicas > 0 ? o.replicas : 2, torch::Device(torch::kCPU));
  }
  return devices;
}

int train(const Options& o) {
  const auto started = std::chrono::steady_clock::now();
  auto group = ddp::init(ddp::InitOptions().backend("gloo"));  // alone: a group of one
  if (group->size() != 1) {
    throw ddp::ConfigError(
        "example_lenet_dp trains in one process (DataParallel), but it was started as " +
        std::to_string(group->size()) +
        " ranks; run it alone or with --nproc-per-node 1, "
        "or use example_mnist_ddp for several processes.");
  }
  const std::vector<torch::Device> devices = replica_devices(o);
  FashionMnist train_set(o.data_dir, FashionMnist::Split::kTrain);
  FashionMnist test_set(o.data_dir, FashionMnist::Split::kTest);
  torch::manual_seed(o.seed);
  ddp::examples::LeNet5 net;
  net->to(devices[0]);  // The model lives on the first device; replicas are made from it.
  ddp::DataParallel model(net, ddp::DataParallelOptions().devices(devices));
  torch::optim::Adam optimizer(model->parameters(), torch::optim::AdamOptions(o.lr));
  torch::optim::StepLR scheduler(optimizer, /*step_size=*/1, o.lr_gamma);
  // One process sees the whole data set: a sampler of one replica just shuffles.
  ddp::data::DistributedSampler sampler(train_set.size().value(), 1, 0,
                                        ddp::data::DistributedSamplerOptions().seed(o.seed));
  const int64_t steps_per_epoch = (sampler.shard_size() + o.batch_size - 1) / o.batch_size;

  ddp::snapshot::TrainingState state;
  state.model = net.ptr().get();
  state.optimizer = &optimizer;
  state.scheduler = &scheduler;
  ddp::examples::PeriodicSnapshots snapshots(group, o);
  const bool resumed = snapshots.resume(state);
  int64_t global_step = state.counters["global_step"];
  int64_t steps_to_run = o.epochs * steps_per_epoch - global_step;
  if (o.max_steps > 0) steps_to_run = std::min(steps_to_run, o.max_steps - global_step);
  ddp::training::ProgressReporter progress(0, o.epochs, steps_per_epoch,
                                           std::max<int64_t>(0, steps_to_run));
  if (resumed) {
    progress.message("resumed from " + o.snapshot_dir + " at epoch " +
                     std::to_string(state.epoch + 1) + " step " +
                     std::to_string(state.step_in_epoch) + " (global step " +
                     std::to_string(global_step) + ")");
  }
  std::string where;
  for (const auto& device : devices) where += (where.empty() ? "" : ", ") + device.str();
  progress.message(std::to_string(devices.size()) + " replicas (" + where + "); batches of " +
                   std::to_string(o.batch_size) + " split among them");
  ddp::examples::MetricsOutput metrics(o, 0, state.epoch,
                                       "LeNet-5 with DataParallel on Fashion-MNIST");

  ddp::examples::TrainingUtilization utilization(devices[0]);
  auto limit_reached = [&] { return o.max_steps > 0 && global_step >= o.max_steps; };
  double loss = NAN, accuracy = NAN;
  for (int64_t epoch = state.epoch; epoch < o.epochs && !limit_reached(); ++epoch) {
    const int64_t first_step = epoch == state.epoch ? state.step_in_epoch : 0;
    sampler.restore(epoch, first_step * o.batch_size);  // set_epoch(epoch), then skip what was done
    progress.begin_epoch(epoch, first_step);
    for (int64_t step = first_step; !limit_reached(); ++step) {
      std::vector<int64_t> batch = sampler.next(o.batch_size);
      if (batch.empty()) break;
      torch::Tensor index = torch::tensor(batch, torch::kLong);
      torch::Tensor images = train_set.images().index_select(0, index).to(devices[0]);
      torch::Tensor labels = train_set.labels().index_select(0, index).to(devices[0]);
      optimizer.zero_grad();
      torch::Tensor step_loss = torch::nn::functional::cross_entropy(
          utilization.forward([&] { return model->forward(images); }), labels);
      step_loss.backward();  // every replica's gradient lands in net's .grad
      optimizer.step();
      ++global_step;
      progress.step(step_loss.item<double>(), static_cast<int64_t>(batch.size()));
      const bool epoch_done = sampler.position() == sampler.shard_size();
      if (epoch_done) scheduler.step();
      state.epoch = epoch_done ? epoch + 1 : epoch;
      state.step_in_epoch = epoch_done ? 0 : step + 1;
      state.counters["global_step"] = global_step;
      snapshots.after_step(state, epoch_done, /*stopping=*/limit_reached());
    }
    const ddp::training::EpochProgress done = progress.end_epoch();
    utilization.add_epoch(done);
    loss = done.mean_loss;
    accuracy = ddp::examples::sharded_accuracy(model, test_set.images(), test_set.labels(), *group);
    metrics.record({epoch + 1, loss, accuracy, done.samples_per_s, done.seconds});
    char text[128];
    std::snprintf(text, sizeof(text),
                  "epoch %lld/%lld: train loss %.4f, test accuracy %.2f%%, lr %.2e",
                  static_cast<long long>(epoch + 1), static_cast<long long>(o.epochs), loss,
                  100 * accuracy, optimizer.param_groups()[0].options().get_lr());
    progress.message(text);
  }
  if (std::isnan(accuracy)) {  // Nothing left to train: the snapshot is the result.
    accuracy = ddp::examples::sharded_accuracy(model, test_set.images(), test_set.labels(), *group);
  }
  const std::string outputs = metrics.finish();
  const std::string mfu = utilization.summary(*group);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
  char text[160];
  std::snprintf(text, sizeof(text), "done: %lld steps, test accuracy %.2f%%, %.1f s in all",
                static_cast<long long>(global_step), 100 * accuracy, seconds);
  progress.message(text);
  if (!mfu.empty()) progress.message(mfu);
  if (!outputs.empty()) progress.message(outputs);
  std::printf("params-digest=%s\nfinal loss=%.6f accuracy=%.4f\n",
              ddp::examples::weights_digest(*net).c_str(), loss, accuracy);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "LeNet-5 on Fashion-MNIST with DataParallel (one process, several replicas),\n"
      "Adam and StepLR.",
      "example_lenet_dp"};
  Options o;
  ddp::examples::add_common_options(app, o, /*reads_data=*/true);
  app.add_option("--batch-size", o.batch_size, "samples per step, split among the replicas")
      ->check(CLI::Range(int64_t{1}, int64_t{60000}))
      ->capture_default_str();
  app.add_option("--gpus", o.gpus,
                 "on CUDA: one replica on each of the first N GPUs (0: every visible GPU)")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  app.add_option("--replicas", o.replicas, "on the CPU: this many replicas (0: 2)")
      ->check(CLI::Range(0, 64))
      ->capture_default_str();
  app.add_option("--lr", o.lr, "Adam learning rate")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--lr-gamma", o.lr_gamma, "StepLR: learning-rate factor after each epoch")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return ddp::examples::run_example([&] { return train(o); });
}

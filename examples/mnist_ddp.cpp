// The PyTorch DDP tutorial in C++: the tutorial's ConvNet trained on
// Fashion-MNIST with DistributedDataParallel, each rank on its shard of the
// data (DistributedSampler), test accuracy after every epoch.
//
//   ddprun --standalone --nproc-per-node 2 build/bin/example_mnist_ddp \
//       --epochs 5 --metrics-csv metrics.csv --plot curves.png --snapshot-dir snapshots
//
// --comm-hook picks how DDP reduces gradients: allreduce (the default), fp16
// or bf16 (16-bit on the wire), or powersgd (rank --powersgd-rank factors
// with error feedback, after --powersgd-start-iteration plain steps).
//
// --device picks the CPU or each rank's GPU (cuda:LOCAL_RANK; auto: the GPU
// where CUDA is available); the default backend `auto` then reduces the CUDA
// gradients with NCCL.
//
// --amp O1 trains with mixed precision (bfloat16 on CPU, float16 on CUDA;
// Apex's levels O0 to O3 with a loss scaler whose overflow skips agree
// across ranks); --sync-bn turns the batch norms into SyncBatchNorm
// (statistics over the global batch).
//
// The tutorial trains with SGD lr 1e-4 and batch 100, far too slowly for 5
// epochs; the defaults here (SGD with momentum 0.9, lr 0.02, weight decay
// 5e-4, batch 64 per rank, learning rate halved every 2 epochs) reach
// about 90% test accuracy in 5 epochs on 2 ranks.

#include <CLI/CLI.hpp>
#include <torch/torch.h>

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
#include "ddp/data/distributed_sampler.hpp"
#include "ddp/data/fashion_mnist.hpp"
#include "ddp/ddp.hpp"
#include "ddp/training/progress.hpp"

namespace {

using ddp::data::FashionMnist;

struct Options : ddp::examples::CommonOptions {
  int64_t batch_size = 64;  // per rank
  double lr = 0.02;
  double momentum = 0.9;
  double weight_decay = 5e-4;
  int64_t lr_step_epochs = 2;
  double lr_gamma = 0.5;
  std::string amp = "O0";        // mixed-precision level, O0 (float32) to O3
  bool sync_bn = false;          // batch norms synchronized across ranks
  std::string backend = "auto";  // NCCL for CUDA; shm on one node, Gloo between nodes
  std::string comm_hook = "allreduce";
  int64_t powersgd_rank = 2;
  int64_t powersgd_start_iteration = 1000;
};

std::shared_ptr<ddp::CommHook> comm_hook(const Options& o) {
  if (o.comm_hook == "fp16") return ddp::fp16_compress_hook();
  if (o.comm_hook == "bf16") return ddp::bf16_compress_hook();
  if (o.comm_hook == "powersgd") {
    return std::make_shared<ddp::PowerSgdHook>(ddp::PowerSgdOptions()
                                                   .matrix_approximation_rank(o.powersgd_rank)
                                                   .start_iteration(o.powersgd_start_iteration));
  }
  return ddp::all_reduce_hook();
}

// The model, identical on every rank (DDP copies rank 0's weights anyway,
// and the seed makes a single-process run reproducible too), on `device`.
ddp::examples::ConvNet build_model(const Options& o, torch::Device device,
                                   const std::shared_ptr<ddp::ProcessGroup>& group) {
  torch::manual_seed(o.seed);
  ddp::examples::ConvNet net;
  if (o.sync_bn)
    ddp::nn::convert_sync_batchnorm(net.ptr(), group);  // in place: the BNs sit in Sequentials
  net->to(device);
  return net;
}

// Mixed precision's 16-bit type: float16 on CUDA (the GradScaler covers its
// small range), bfloat16 on the CPU (CPU autocast has no float16).
ddp::amp::AmpOptions amp_options(const Options& o, torch::Device device) {
  return ddp::amp::AmpOptions(ddp::amp::parse_opt_level(o.amp))
      .dtype(device.is_cuda() ? torch::kHalf : torch::kBFloat16);
}

// Everything a training step touches. The order matters: the model (on its
// device) and its optimizer come first, whatever changes them (mixed
// precision) next, and DistributedDataParallel wraps the finished model last.
struct Trainer {
  Trainer(const Options& o, torch::Device device, std::shared_ptr<ddp::ProcessGroup> group)
      : device(device),
        net(build_model(o, device, group)),
        optimizer(net->parameters(),
                  torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay)),
        scheduler(optimizer, o.lr_step_epochs, o.lr_gamma),
        amp(*net, optimizer, amp_options(o, device), group),
        scaler(ddp::amp::GradScalerOptions().enabled(o.amp != "O0"), group),
        model(net, ddp::DistributedDataParallelOptions().comm_hook(comm_hook(o)),
              std::move(group)) {}

  torch::Device device;        // where the model and each batch are
  ddp::examples::ConvNet net;  // the model itself (saved, evaluated)
  torch::optim::SGD optimizer;
  torch::optim::StepLR scheduler;      // stepped once per epoch
  ddp::amp::MixedPrecision amp;        // O2: the optimizer now holds float32 masters
  ddp::amp::GradScaler scaler;         // dynamic loss scaling (off at O0)
  ddp::DistributedDataParallel model;  // the same model; gradients averaged over ranks
};

// One step: the batch to the model's device, forward, loss, backward (DDP
// averages the gradients over the ranks while backward runs), update.
// Returns this rank's loss.
double train_step(Trainer& t, const torch::Tensor& images, const torch::Tensor& labels) {
  t.amp.zero_grad();
  torch::Tensor loss = torch::nn::functional::cross_entropy(
      t.amp.forward(t.model, images.to(t.device)), labels.to(t.device));
  t.scaler.scale(loss).backward();
  t.amp.step(t.scaler);  // skipped on every rank if any rank's gradients overflowed
  t.scaler.update();
  return loss.item<double>();
}

int train(const Options& o) {
  const auto started = std::chrono::steady_clock::now();
  auto group = ddp::init(ddp::InitOptions().backend(o.backend));
  const int rank = group->rank(), world = group->size();
  const torch::Device device =
      ddp::examples::resolve_device(o.device, group->topology().local_rank);
  FashionMnist train_set(o.data_dir, FashionMnist::Split::kTrain);
  FashionMnist test_set(o.data_dir, FashionMnist::Split::kTest);
  ddp::data::DistributedSampler sampler(train_set.size().value(), world, rank,
                                        ddp::data::DistributedSamplerOptions().seed(o.seed));
  const int64_t steps_per_epoch = (sampler.shard_size() + o.batch_size - 1) / o.batch_size;
  Trainer t(o, device, group);

  ddp::snapshot::TrainingState state;
  state.model = t.net.ptr().get();
  state.optimizer = &t.optimizer;
  state.scheduler = &t.scheduler;
  state.grad_scaler = &t.scaler;
  for (auto& [name, master] : t.amp.master_weights()) state.extra_tensors[name] = master;  // O2
  ddp::examples::PeriodicSnapshots snapshots(group, o);
  const bool resumed = snapshots.resume(state);
  int64_t global_step = state.counters["global_step"];
  int64_t steps_to_run = o.epochs * steps_per_epoch - global_step;
  if (o.max_steps > 0) steps_to_run = std::min(steps_to_run, o.max_steps - global_step);
  ddp::training::ProgressReporter progress(rank, o.epochs, steps_per_epoch,
                                           std::max<int64_t>(0, steps_to_run));
  if (resumed && rank == 0) {
    progress.message("resumed from " + o.snapshot_dir + " at epoch " +
                     std::to_string(state.epoch + 1) + " step " +
                     std::to_string(state.step_in_epoch) + " (global step " +
                     std::to_string(global_step) + ")");
  }
  if (rank == 0 && (o.amp != "O0" || o.sync_bn || o.comm_hook != "allreduce")) {
    const bool half = t.amp.options().dtype() == torch::kHalf;
    progress.message("mixed precision " + o.amp +
                     (o.amp == "O0" ? ""
                      : half        ? " (float16)"
                                    : " (bfloat16)") +
                     (o.sync_bn ? ", SyncBatchNorm" : "") + ", backend " + group->backend_name() +
                     ", comm hook " + t.model->options().comm_hook()->name());
  }
  progress.message("shard of " + std::to_string(sampler.shard_size()) + " samples, " +
                   std::to_string(steps_per_epoch) + " steps of " + std::to_string(o.batch_size) +
                   " per epoch, on " + device.str());
  ddp::examples::MetricsOutput metrics(
      o, rank, state.epoch, "ConvNet on Fashion-MNIST, " + std::to_string(world) + " ranks");

  auto limit_reached = [&] { return o.max_steps > 0 && global_step >= o.max_steps; };
  double loss = NAN, accuracy = NAN;
  for (int64_t epoch = state.epoch; epoch < o.epochs && !limit_reached(); ++epoch) {
    // A new shuffle every epoch, the same on every rank; a resumed epoch
    // continues from the samples the whole job consumed, at any world size.
    const int64_t consumed = epoch == state.epoch ? state.samples_in_epoch : 0;
    sampler.restore_global(epoch, consumed);
    const int64_t first_step = consumed / (o.batch_size * world);
    progress.begin_epoch(epoch, first_step);
    for (int64_t step = first_step; !limit_reached(); ++step) {
      std::vector<int64_t> batch = sampler.next(o.batch_size);
      if (batch.empty()) break;
      torch::Tensor index = torch::tensor(batch, torch::kLong);
      const double step_loss = train_step(t, train_set.images().index_select(0, index),
                                          train_set.labels().index_select(0, index));
      ++global_step;
      progress.step(step_loss, static_cast<int64_t>(batch.size()) * world);
      const bool epoch_done = sampler.position() == sampler.shard_size();
      if (epoch_done) t.scheduler.step();
      state.epoch = epoch_done ? epoch + 1 : epoch;
      state.step_in_epoch = epoch_done ? 0 : step + 1;
      state.samples_in_epoch = epoch_done ? 0 : sampler.global_position();
      state.counters["global_step"] = global_step;
      snapshots.after_step(state, epoch_done, /*stopping=*/limit_reached());
    }
    const ddp::training::EpochProgress done = progress.end_epoch();
    // The epoch's loss: every rank's mean over the steps it ran, averaged.
    loss = ddp::examples::sum_across_ranks(done.mean_loss, *group) / world;
    ddp::examples::broadcast_buffers(*t.net, *group);
    accuracy = ddp::examples::sharded_accuracy(
        t.net, test_set.images(), test_set.labels(), *group, 1000,
        [&t](const torch::Tensor& x) { return t.amp.forward(t.net, x); });
    metrics.record({epoch + 1, loss, accuracy, done.samples_per_s, done.seconds});
    if (rank == 0) {
      char text[128];
      std::snprintf(text, sizeof(text), "epoch %lld/%lld: train loss %.4f, test accuracy %.2f%%",
                    static_cast<long long>(epoch + 1), static_cast<long long>(o.epochs), loss,
                    100 * accuracy);
      progress.message(text);
    }
  }
  if (std::isnan(accuracy)) {  // Nothing left to train: the snapshot is the result.
    ddp::examples::broadcast_buffers(*t.net, *group);
    accuracy = ddp::examples::sharded_accuracy(
        t.net, test_set.images(), test_set.labels(), *group, 1000,
        [&t](const torch::Tensor& x) { return t.amp.forward(t.net, x); });
  }
  const std::string outputs = metrics.finish();
  if (rank == 0) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    char text[160];
    std::snprintf(text, sizeof(text), "done: %lld steps, test accuracy %.2f%%, %.1f s in all",
                  static_cast<long long>(global_step), 100 * accuracy, seconds);
    progress.message(text);
    if (!outputs.empty()) progress.message(outputs);
    std::printf("params-digest=%s\nfinal loss=%.6f accuracy=%.4f\n",
                ddp::examples::weights_digest(*t.net).c_str(), loss, accuracy);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "The DDP tutorial: a ConvNet on Fashion-MNIST with DistributedDataParallel.\n"
      "Run alone, or under ddprun/torchrun for several ranks.",
      "example_mnist_ddp"};
  Options o;
  ddp::examples::add_common_options(app, o, /*reads_data=*/true);
  app.add_option("--batch-size", o.batch_size, "samples per rank and step")
      ->check(CLI::Range(int64_t{1}, int64_t{60000}))
      ->capture_default_str();
  app.add_option("--lr", o.lr, "SGD learning rate")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--momentum", o.momentum, "SGD momentum")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--weight-decay", o.weight_decay, "L2 penalty")
      ->check(CLI::NonNegativeNumber)
      ->capture_default_str();
  app.add_option("--lr-step-epochs", o.lr_step_epochs,
                 "multiply the learning rate by --lr-gamma every N epochs")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  app.add_option("--lr-gamma", o.lr_gamma, "learning-rate factor of each step")
      ->check(CLI::Range(0.0, 1.0))
      ->capture_default_str();
  app.add_option("--amp", o.amp,
                 "mixed precision: O0 float32, O1 autocast, O2 16-bit model with float32 "
                 "masters, O3 all 16-bit (bfloat16 on CPU, float16 on CUDA)")
      ->check(CLI::IsMember({"O0", "O1", "O2", "O3"}))
      ->capture_default_str();
  app.add_flag("--sync-bn", o.sync_bn, "SyncBatchNorm: batch statistics over every rank's batch");
  app.add_option("--backend", o.backend,
                 "process-group backend: auto (NCCL for CUDA tensors, shm or Gloo for the rest), "
                 "shm, gloo or nccl")
      ->check(CLI::IsMember({"auto", "shm", "gloo", "nccl"}))
      ->capture_default_str();
  app.add_option("--comm-hook", o.comm_hook,
                 "how DDP reduces gradients: allreduce, fp16, bf16 or powersgd")
      ->check(CLI::IsMember({"allreduce", "fp16", "bf16", "powersgd"}))
      ->capture_default_str();
  app.add_option("--powersgd-rank", o.powersgd_rank, "rank of PowerSGD's approximation")
      ->check(CLI::Range(int64_t{1}, int64_t{1024}))
      ->capture_default_str();
  app.add_option("--powersgd-start-iteration", o.powersgd_start_iteration,
                 "steps reduced uncompressed before PowerSGD starts")
      ->check(CLI::Range(int64_t{2}, int64_t{1} << 40))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return ddp::examples::run_example([&] { return train(o); });
}

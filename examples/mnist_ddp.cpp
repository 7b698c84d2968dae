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
// --shard full trains with FullyShardedDataParallel (FSDP, ZeRO-3) instead
// of DDP: the ConvNet's three layers are its units (their parameters,
// gradients and momentum sharded across the ranks, each layer gathered just
// before it runs), the optimizer steps this rank's shards, evaluation runs
// through the sharded forward, and each rank writes its shard of every
// snapshot. It refuses what FSDP does not support here: --amp other than
// O0, --comm-hook.
//
// The tutorial trains with SGD lr 1e-4 and batch 100, far too slowly for 5
// epochs; the defaults here (SGD with momentum 0.9, lr 0.02, weight decay
// 5e-4, batch 64 per rank, learning rate halved every 2 epochs) reach
// about 90% test accuracy in 5 epochs on 2 ranks.

#include <torch/torch.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <memory>
#include <optional>

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
  std::string shard = "none";  // none: DDP; full: FullyShardedDataParallel
};

// What FSDP does not support in this trainer, refused before anything
// starts rather than ignored: Apex's levels (ddp::amp::MixedPrecision) cast
// and broadcast the whole model's parameters, which FSDP has sharded (FSDP's
// own mixed precision is its param_dtype, not offered here), and comm hooks
// are DDP's.
void check_shard_options(const Options& o) {
  if (o.shard != "full") return;
  auto refuse = [](const std::string& option, const std::string& why) {
    throw ddp::ConfigError(option + " is not supported with --shard full: " + why);
  };
  if (o.amp != "O0") {
    refuse("--amp " + o.amp,
           "Apex's levels act on the whole model, which FSDP shards (its mixed precision is "
           "param_dtype, not offered by this trainer); use --amp O0.");
  }
  if (o.comm_hook != "allreduce") {
    refuse("--comm-hook " + o.comm_hook,
           "comm hooks are DistributedDataParallel's; FSDP reduce-scatters the gradients.");
  }
}

// FSDP's units: the ConvNet's three layers, which its forward runs through
// ddp::sharded_call (examples/common/models.hpp).
ddp::FullyShardedDataParallelOptions fsdp_options() {
  return ddp::FullyShardedDataParallelOptions().wrap_policy(
      [](const std::string& name, const torch::nn::Module&) {
        return name == "layer1" || name == "layer2" || name == "fc";
      });
}

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

// Everything a training step touches. The order matters. With DDP: the
// model (on its device) and its optimizer come first, whatever changes them
// (mixed precision) next, and DistributedDataParallel wraps the finished
// model last. With FSDP (--shard full) the wrapper comes first, since the
// optimizer steps its shards, and there is no mixed precision.
struct Trainer {
  Trainer(const Options& o, torch::Device device, std::shared_ptr<ddp::ProcessGroup> group)
      : device(device),
        net(build_model(o, device, group)),
        fsdp(o.shard == "full" ? ddp::FullyShardedDataParallel(net, fsdp_options(), group)
                               : ddp::FullyShardedDataParallel(nullptr)),
        optimizer(fsdp ? fsdp->parameters() : net->parameters(),
                  torch::optim::SGDOptions(o.lr).momentum(o.momentum).weight_decay(o.weight_decay)),
        scheduler(optimizer, o.lr_step_epochs, o.lr_gamma),
        scaler(ddp::amp::GradScalerOptions().enabled(o.amp != "O0"), group) {
    if (fsdp) {
      sharded = std::make_unique<ddp::FullyShardedState>(fsdp, optimizer);
      return;
    }
    amp.emplace(*net, optimizer, amp_options(o, device), group);
    model = ddp::DistributedDataParallel(
        net, ddp::DistributedDataParallelOptions().comm_hook(comm_hook(o)), std::move(group));
  }

  torch::Device device;        // where the model and each batch are
  ddp::examples::ConvNet net;  // the model itself (saved, evaluated; with FSDP, its buffers)
  ddp::FullyShardedDataParallel fsdp;  // --shard full: the same model, its parameters sharded
  torch::optim::SGD optimizer;         // DDP: the model's parameters; FSDP: this rank's shards
  torch::optim::StepLR scheduler;      // stepped once per epoch
  std::unique_ptr<ddp::FullyShardedState> sharded;  // FSDP: the shards and their SGD state
  std::optional<ddp::amp::MixedPrecision> amp;      // DDP; O2: the optimizer holds float32 masters
  ddp::amp::GradScaler scaler;                      // dynamic loss scaling (off at O0)
  ddp::DistributedDataParallel model{nullptr};      // DDP: the same model; gradients averaged
};

// One step: the batch to the model's device, forward, loss, backward (DDP
// averages the gradients over the ranks while backward runs; FSDP
// reduce-scatters each unit's into this rank's shard), update. Returns this
// rank's loss.
double train_step(Trainer& t, ddp::examples::TrainingUtilization& utilization,
                  const torch::Tensor& images, const torch::Tensor& labels) {
  if (t.fsdp) {
    t.optimizer.zero_grad();
    torch::Tensor loss = torch::nn::functional::cross_entropy(
        utilization.forward([&] { return t.fsdp->forward(images.to(t.device)); }),
        labels.to(t.device));
    loss.backward();
    t.optimizer.step();  // this rank's shards only
    return loss.item<double>();
  }
  t.amp->zero_grad();
  torch::Tensor loss = torch::nn::functional::cross_entropy(
      utilization.forward([&] { return t.amp->forward(t.model, images.to(t.device)); }),
      labels.to(t.device));
  t.scaler.scale(loss).backward();
  t.amp->step(t.scaler);  // skipped on every rank if any rank's gradients overflowed
  t.scaler.update();
  return loss.item<double>();
}

// Test accuracy, every rank scoring a slice (common/distributed_eval.hpp),
// with rank 0's batch-norm statistics. FSDP evaluates through its sharded
// forward (each unit gathered in turn), which every rank runs as often.
double test_accuracy(Trainer& t, const FashionMnist& test_set, ddp::ProcessGroup& group) {
  ddp::examples::broadcast_buffers(*t.net, group);
  if (t.fsdp) {
    return ddp::examples::sharded_accuracy(t.fsdp, test_set.images(), test_set.labels(), group,
                                           1000);
  }
  return ddp::examples::sharded_accuracy(
      t.net, test_set.images(), test_set.labels(), group, 1000,
      [&t](const torch::Tensor& x) { return t.amp->forward(t.net, x); });
}

// The digest of the trained weights, the same on every rank; with FSDP the
// full parameters are gathered (by every rank) from the shards.
std::string trained_digest(Trainer& t) {
  if (!t.fsdp) return ddp::examples::weights_digest(*t.net);
  std::vector<torch::Tensor> tensors;
  for (const auto& item : t.fsdp->full_parameters()) tensors.push_back(item.value());
  for (const auto& buffer : t.net->buffers()) tensors.push_back(buffer);
  return ddp::examples::weights_digest(tensors);
}

int train(const Options& o) {
  const auto started = std::chrono::steady_clock::now();
  check_shard_options(o);
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
  state.model = t.net.ptr().get();  // with FSDP its buffers: the parameters are in the shards
  if (t.sharded) {
    state.fully_sharded = t.sharded.get();  // each rank saves and resumes its shard
  } else {
    state.optimizer = &t.optimizer;
  }
  state.scheduler = &t.scheduler;
  state.grad_scaler = &t.scaler;
  if (t.amp) {
    for (auto& [name, master] : t.amp->master_weights()) state.extra_tensors[name] = master;  // O2
  }
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
  if (t.fsdp) {
    std::string units;
    for (const auto& name : t.fsdp->unit_names()) units += (units.empty() ? "" : ", ") + name;
    int64_t full = 0, shard = 0;
    for (const auto& p : t.net->parameters()) full += p.numel();
    for (const auto& p : t.fsdp->parameters()) shard += p.numel();
    progress.message("FullyShardedDataParallel: units " + units + "; " + std::to_string(shard) +
                     " of the " + std::to_string(full) + " parameters held on this rank" +
                     (o.sync_bn ? ", SyncBatchNorm" : "") + ", backend " + group->backend_name());
  } else if (rank == 0 && (o.amp != "O0" || o.sync_bn || o.comm_hook != "allreduce")) {
    const bool half = t.amp->options().dtype() == torch::kHalf;
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

  ddp::examples::TrainingUtilization utilization(device);
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
      const double step_loss = train_step(t, utilization, train_set.images().index_select(0, index),
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
    utilization.add_epoch(done);
    // The epoch's loss: every rank's mean over the steps it ran, averaged.
    loss = ddp::examples::sum_across_ranks(done.mean_loss, *group) / world;
    accuracy = test_accuracy(t, test_set, *group);
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
    accuracy = test_accuracy(t, test_set, *group);
  }
  const std::string digest = trained_digest(t);  // a collective under FSDP
  const std::string outputs = metrics.finish();
  const std::string mfu = utilization.summary(*group);
  if (rank == 0) {
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    char text[160];
    std::snprintf(text, sizeof(text), "done: %lld steps, test accuracy %.2f%%, %.1f s in all",
                  static_cast<long long>(global_step), 100 * accuracy, seconds);
    progress.message(text);
    if (!mfu.empty()) progress.message(mfu);
    if (!outputs.empty()) progress.message(outputs);
    std::printf("params-digest=%s\nfinal loss=%.6f accuracy=%.4f\n", digest.c_str(), loss,
                accuracy);
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
  app.add_option("--shard", o.shard,
                 "none: DistributedDataParallel; full: FullyShardedDataParallel (parameters, "
                 "gradients and momentum sharded over the ranks, each rank snapshotting its "
                 "shard; not with --amp O1-O3 or --comm-hook)")
      ->check(CLI::IsMember({"none", "full"}))
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  return ddp::examples::run_example([&] { return train(o); });
}

// ddp_train_bench: ddp's side of benchmarks/ddp_vs_pytorch.sh. Trains the
// same models on the same data as benchmarks/pytorch_ddp_bench.py, one rank
// per process under torchrun, and prints on rank 0:
//
//   result side=ddp model=linear ranks=2 batch=32 steps=... images_per_s=...
//       step_ms=... nosync_step_ms=... nosync_backward_ms=... backward_ms=...
//       loss=... hook=... param_bytes=... buckets=A;B;... tx_bytes_per_step=...
//
//       mfu=... model_flops=... peak_gflops_per_core=... cores=...
//
// (model_flops: three times a batch's forward, counted by
// ddp::training::FlopCounter, every rank's steps; mfu: over the synchronized
// steps' time and rank 0's measured peak. nosync_backward_ms: inside loss.backward() in the no_sync
// steps, which gives the cost model backward's share of a step; backward_ms: the same in the
// synchronized steps, where it includes waiting for the gradients.)
//
// Models: linear (the torchrun tutorial's toy), convnet (the tutorials'
// ConvNet on Fashion-MNIST) and mlp (a 784-2048-2048-2048-10 perceptron on
// Fashion-MNIST: 10.0 M parameters, 40 MB of gradients per step, batch 16, for the
// simulated cluster of benchmarks/cluster_bench.sh). --hook picks the comm
// hook (none, fp16, bf16, powersgd); --net-interface names the interface
// whose sent bytes are counted over the synchronized steps.
//
//   torchrun --standalone --nproc_per_node 2 --no_python
//       build/bin/ddp_train_bench --model convnet    (one command line)
//
// Note [Same work as the Python side]
// The data pipeline mirrors DataLoader + DistributedSampler: each epoch draws
// a permutation from a generator seeded with seed + epoch, pads it to a
// multiple of the world size, takes every world-th index from this rank's
// offset, and cuts it into batches (the last one may be short). A batch is
// gathered with index_select, which does the copying that DataLoader's
// collate does. A step is: fetch a batch, zero_grad, forward, loss,
// backward, optimizer step; the timed interval is between two barriers.

#include <torch/torch.h>
#include <torch/version.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <iostream>
#include <optional>
#include <sstream>

#include "common/models.hpp"
#include "ddp/data/distributed_sampler.hpp"
#include "ddp/data/fashion_mnist.hpp"
#include "ddp/ddp.hpp"
#include "ddp/parallel/distributed_data_parallel.hpp"
#include "ddp/parallel/powersgd_hook.hpp"
#include "net_counter.hpp"
#include "utilization.hpp"

namespace {

using ddp_bench::tx_bytes;

struct Options {
  std::string model = "linear";
  int steps = 0;    // 0: the model's default.
  int warmup = -1;  // -1: the model's default.
  int batch = 0;    // 0: the model's default.
  std::string data_dir = ddp::data::FashionMnist::kDefaultRoot;
  uint64_t seed = 0;
  std::string backend = "auto";  // shm on one node, as a user gets by default.
  std::string hook = "none";
  int64_t powersgd_rank = 2;
  std::string net_interface;  // Empty: no byte count.
  // DistributedDataParallelOptions; the script keeps ddp's defaults.
  ddp::DistributedDataParallelOptions ddp;
};

// Batches of an in-memory data set in ddp::data::DistributedSampler's order
// (PyTorch's: randperm seeded by seed + epoch, padded, strided by rank); see
// Note [Same work as the Python side].
class ShardedBatches {
 public:
  ShardedBatches(torch::Tensor inputs, torch::Tensor targets, int64_t batch, int rank, int world,
                 uint64_t seed)
      : inputs_(std::move(inputs)),
        targets_(std::move(targets)),
        batch_(batch),
        sampler_(inputs_.size(0), world, rank, ddp::data::DistributedSamplerOptions().seed(seed)) {}

  std::pair<torch::Tensor, torch::Tensor> next() {
    std::vector<int64_t> indices = sampler_.next(batch_);
    if (indices.empty()) {
      sampler_.set_epoch(sampler_.epoch() + 1);
      indices = sampler_.next(batch_);
    }
    torch::Tensor index = torch::tensor(indices, torch::kLong);
    return {inputs_.index_select(0, index), targets_.index_select(0, index)};
  }

 private:
  torch::Tensor inputs_, targets_;
  int64_t batch_;
  ddp::data::DistributedSampler sampler_;
};

struct Timed {
  double seconds;
  double loss;
  int64_t tx_bytes;         // Sent through the counted interface; 0 when none.
  double backward_seconds;  // Inside loss.backward(), summed over the steps.
};

// The perceptron of --model mlp: enough gradient bytes (40 MB) that a slow
// link, not compute, decides the step time. (A module of its own: AnyModule
// cannot hold a Sequential, whose forward is a template.)
struct MlpImpl : torch::nn::Module {
  MlpImpl()
      : layers(register_module(
            "layers", torch::nn::Sequential(torch::nn::Linear(784, 2048), torch::nn::ReLU(),
                                            torch::nn::Linear(2048, 2048), torch::nn::ReLU(),
                                            torch::nn::Linear(2048, 2048), torch::nn::ReLU(),
                                            torch::nn::Linear(2048, 10)))) {}
  torch::Tensor forward(const torch::Tensor& images) {
    return layers->forward(images.reshape({images.size(0), -1}));
  }
  torch::nn::Sequential layers;
};
TORCH_MODULE(Mlp);

std::shared_ptr<ddp::CommHook> make_hook(const Options& options) {
  if (options.hook == "fp16") return ddp::fp16_compress_hook();
  if (options.hook == "bf16") return ddp::bf16_compress_hook();
  if (options.hook == "powersgd") {
    // Compression from the second iteration: the warm-up steps run first.
    return std::make_shared<ddp::PowerSgdHook>(
        ddp::PowerSgdOptions().matrix_approximation_rank(options.powersgd_rank).start_iteration(2));
  }
  return nullptr;
}

// Runs `steps` training steps between two barriers; with `sync` false every
// backward runs under no_sync(), so no gradient is all-reduced.
template <typename LossFn>
Timed run_steps(ddp::DistributedDataParallel& model, torch::optim::Optimizer& optimizer,
                LossFn loss_fn, ShardedBatches& data, int steps, bool sync,
                const std::string& interface) {
  auto& group = *model->process_group();
  group.barrier();
  const int64_t tx_before = tx_bytes(interface);
  const auto start = std::chrono::steady_clock::now();
  torch::Tensor loss;
  std::chrono::steady_clock::duration backward{};
  for (int step = 0; step < steps; ++step) {
    auto [inputs, targets] = data.next();
    optimizer.zero_grad();
    // Under no_sync() (the guard's own constructor: it cannot be moved).
    std::optional<ddp::DistributedDataParallelImpl::NoSyncGuard> guard;
    if (!sync) guard.emplace(*model);
    loss = loss_fn(model->forward(inputs), targets);
    const auto backward_start = std::chrono::steady_clock::now();
    loss.backward();
    backward += std::chrono::steady_clock::now() - backward_start;
    guard.reset();
    optimizer.step();
  }
  group.barrier();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {seconds, loss.defined() ? loss.item<double>() : 0.0, tx_bytes(interface) - tx_before,
          std::chrono::duration<double>(backward).count()};
}

int run(Options options) {
  const bool linear = options.model == "linear";
  const bool mlp = options.model == "mlp";
  if (options.steps == 0) options.steps = linear ? 2000 : mlp ? 20 : 100;
  if (options.warmup < 0) options.warmup = linear ? 100 : mlp ? 3 : 10;
  if (options.batch == 0) options.batch = linear ? 32 : mlp ? 16 : 100;

  at::set_num_threads(1);  // One intra-op thread per rank, as the Python side.
  auto group = ddp::init(ddp::InitOptions().backend(options.backend));
  const int rank = group->rank();
  const int world = group->size();
  torch::manual_seed(options.seed + rank);

  torch::Tensor inputs, targets;
  torch::nn::AnyModule net;
  double lr = 0;
  if (linear) {
    // The tutorial's 2048 (rand(20), rand(1)) pairs, drawn in the Python
    // side's order (so with the same seed both train on the same values),
    // then stored as two tensors.
    std::vector<torch::Tensor> xs, ys;
    for (int i = 0; i < 2048; ++i) {
      xs.push_back(torch::rand({20}));
      ys.push_back(torch::rand({1}));
    }
    inputs = torch::stack(xs);
    targets = torch::stack(ys);
    net = torch::nn::AnyModule(torch::nn::Linear(20, 1));
    lr = 1e-3;
  } else {
    ddp::data::FashionMnist train(options.data_dir);
    inputs = train.images();
    targets = train.labels();
    if (mlp) {
      net = torch::nn::AnyModule(Mlp());
    } else {
      net = torch::nn::AnyModule(ddp::examples::ConvNet());
    }
    lr = 0.01;
  }
  int64_t param_bytes = 0;
  for (const auto& p : net.ptr()->parameters()) param_bytes += p.numel() * p.element_size();
  double forward_flops = 0;
  {
    const torch::NoGradGuard no_grad;
    ddp::training::FlopCounter counter;
    net.forward(inputs.narrow(0, 0, std::min<int64_t>(options.batch, inputs.size(0))));
    forward_flops = counter.flops();
  }
  const ddp::training::MachinePeak peak = ddp::training::measure_machine_peak(*group);
  options.ddp.comm_hook(make_hook(options));
  ddp::DistributedDataParallel model(std::move(net), options.ddp, group);
  // Like for like with PyTorch's SGD, which takes its per-parameter path on
  // CPU as torch::optim::SGD does (its foreach path, ddp::optim::SGD's, is
  // its default on CUDA only).
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(lr));
  ShardedBatches data(inputs, targets, options.batch, rank, world, options.seed);
  auto loss_fn = [linear](const torch::Tensor& out, const torch::Tensor& target) {
    return linear ? torch::mse_loss(out, target) : torch::cross_entropy_loss(out, target);
  };

  const std::string& nic = options.net_interface;
  run_steps(model, optimizer, loss_fn, data, options.warmup, /*sync=*/true, nic);
  const Timed synced = run_steps(model, optimizer, loss_fn, data, options.steps, true, nic);
  const Timed local = run_steps(model, optimizer, loss_fn, data, options.steps, false, nic);
  if (rank == 0) {
    std::ostringstream line;
    line.setf(std::ios::fixed);
    line.precision(4);
    line << "result side=ddp model=" << options.model << " backend=" << group->backend_name()
         << " ranks=" << world << " batch=" << options.batch << " steps=" << options.steps
         << " images_per_s="
         << static_cast<double>(world) * options.batch * options.steps / synced.seconds
         << " step_ms=" << 1e3 * synced.seconds / options.steps
         << " nosync_step_ms=" << 1e3 * local.seconds / options.steps
         << " nosync_backward_ms=" << 1e3 * local.backward_seconds / options.steps
         << " backward_ms=" << 1e3 * synced.backward_seconds / options.steps
         << " loss=" << synced.loss << " hook=" << options.hook << " param_bytes=" << param_bytes
         << " buckets=";
    const auto& buckets = model->stats().bucket_bytes;
    for (size_t i = 0; i < buckets.size(); ++i) line << (i ? ";" : "") << buckets[i];
    line << " tx_bytes_per_step=" << synced.tx_bytes / options.steps
         << " libtorch=" << TORCH_VERSION << " "
         << ddp_bench::mfu_fields(3.0 * forward_flops * world * options.steps, synced.seconds,
                                  peak);
    std::cout << line.str() << std::endl;
  }
  group->barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times data-parallel training steps with ddp (run under torchrun)."};
  Options options;
  app.add_option("--model", options.model,
                 "linear (the torchrun tutorial's toy), convnet or mlp (40 MB of gradients)")
      ->check(CLI::IsMember({"linear", "convnet", "mlp"}));
  app.add_option("--steps", options.steps,
                 "timed steps per rank (default 2000 linear, 100 convnet)")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--warmup", options.warmup, "untimed steps first (default 100 linear, 10 convnet)")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--batch", options.batch, "batch size per rank (default 32 linear, 100 convnet)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--data-dir", options.data_dir, "directory of the Fashion-MNIST idx files");
  app.add_option("--seed", options.seed, "seed of the data and of the shuffling");
  app.add_option("--backend", options.backend,
                 "auto (shm on one node, the hierarchical backend across nodes), shm or gloo");
  app.add_option("--hook", options.hook, "comm hook: none, fp16, bf16 or powersgd")
      ->check(CLI::IsMember({"none", "fp16", "bf16", "powersgd"}));
  app.add_option("--powersgd-rank", options.powersgd_rank, "PowerSGD's matrix approximation rank")
      ->check(CLI::Range(1, 1024));
  app.add_option("--net-interface", options.net_interface,
                 "count the bytes this interface sends during the synchronized steps");
  // Tuning knobs for experiments; benchmarks/ddp_vs_pytorch.sh uses the defaults.
  double bucket_cap_mb = options.ddp.bucket_cap_mb();
  double first_bucket_cap_mb = options.ddp.first_bucket_cap_mb();
  bool bucket_view = false, delay_allreduce = false, no_broadcast_buffers = false;
  app.add_option("--bucket-cap-mb", bucket_cap_mb, "DDP bucket cap in MiB")
      ->check(CLI::PositiveNumber);
  app.add_option("--first-bucket-cap-mb", first_bucket_cap_mb, "DDP first bucket cap in MiB")
      ->check(CLI::PositiveNumber);
  app.add_flag("--gradient-as-bucket-view", bucket_view, "gradients alias the buckets");
  app.add_flag("--delay-allreduce", delay_allreduce, "reduce after backward, no overlap");
  app.add_flag("--no-broadcast-buffers", no_broadcast_buffers,
               "do not copy rank 0's buffers (batch norm statistics) each forward");
  CLI11_PARSE(app, argc, argv);
  options.ddp.bucket_cap_mb(bucket_cap_mb)
      .first_bucket_cap_mb(first_bucket_cap_mb)
      .gradient_as_bucket_view(bucket_view)
      .delay_allreduce(delay_allreduce)
      .broadcast_buffers(!no_broadcast_buffers);
  try {
    return run(options);
  } catch (const ddp::Error& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return static_cast<int>(ddp::exit_code_for(e));
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return 1;
  }
}

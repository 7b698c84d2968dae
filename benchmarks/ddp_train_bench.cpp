// ddp_train_bench: ddp's side of benchmarks/ddp_vs_pytorch.sh. Trains the
// same models on the same data as benchmarks/pytorch_ddp_bench.py, one rank
// per process under torchrun, and prints on rank 0:
//
//   result side=ddp model=linear ranks=2 batch=32 steps=... images_per_s=...
//       step_ms=... nosync_step_ms=... loss=...
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

#include <CLI/CLI.hpp>
#include <torch/torch.h>
#include <torch/version.h>

#include <chrono>
#include <iostream>
#include <sstream>

#include "common/models.hpp"
#include "ddp/data/distributed_sampler.hpp"
#include "ddp/data/fashion_mnist.hpp"
#include "ddp/ddp.hpp"
#include "ddp/distributed_data_parallel.hpp"

namespace {

struct Options {
  std::string model = "linear";
  int steps = 0;    // 0: the model's default.
  int warmup = -1;  // -1: the model's default.
  int batch = 0;    // 0: the model's default.
  std::string data_dir = ddp::data::FashionMnist::kDefaultRoot;
  uint64_t seed = 0;
  std::string backend = "auto";  // shm on one node, as a user gets by default.
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
};

// Runs `steps` training steps between two barriers; with `sync` false every
// backward runs under no_sync(), so no gradient is all-reduced.
template <typename LossFn>
Timed runSteps(ddp::DistributedDataParallel& model, torch::optim::Optimizer& optimizer,
               LossFn loss_fn, ShardedBatches& data, int steps, bool sync) {
  auto& group = *model->process_group();
  group.barrier();
  const auto start = std::chrono::steady_clock::now();
  torch::Tensor loss;
  for (int step = 0; step < steps; ++step) {
    auto [inputs, targets] = data.next();
    optimizer.zero_grad();
    if (sync) {
      loss = loss_fn(model->forward(inputs), targets);
      loss.backward();
    } else {
      auto guard = model->no_sync();
      loss = loss_fn(model->forward(inputs), targets);
      loss.backward();
    }
    optimizer.step();
  }
  group.barrier();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {seconds, loss.defined() ? loss.item<double>() : 0.0};
}

int run(Options options) {
  const bool linear = options.model == "linear";
  if (options.steps == 0) options.steps = linear ? 2000 : 100;
  if (options.warmup < 0) options.warmup = linear ? 100 : 10;
  if (options.batch == 0) options.batch = linear ? 32 : 100;

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
    net = torch::nn::AnyModule(ddp::examples::ConvNet());
    lr = 0.01;
  }
  ddp::DistributedDataParallel model(std::move(net), options.ddp, group);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(lr));
  ShardedBatches data(inputs, targets, options.batch, rank, world, options.seed);
  auto loss_fn = [linear](const torch::Tensor& out, const torch::Tensor& target) {
    return linear ? torch::mse_loss(out, target) : torch::cross_entropy_loss(out, target);
  };

  runSteps(model, optimizer, loss_fn, data, options.warmup, /*sync=*/true);
  const Timed synced = runSteps(model, optimizer, loss_fn, data, options.steps, true);
  const Timed local = runSteps(model, optimizer, loss_fn, data, options.steps, false);
  if (rank == 0) {
    std::ostringstream line;
    line.setf(std::ios::fixed);
    line.precision(4);
    line << "result side=ddp model=" << options.model << " backend=" << group->backend_name()
         << " ranks=" << world << " batch=" << options.batch << " steps=" << options.steps
         << " images_per_s="
         << static_cast<double>(world) * options.batch * options.steps / synced.seconds
         << " step_ms=" << 1e3 * synced.seconds / options.steps
         << " nosync_step_ms=" << 1e3 * local.seconds / options.steps << " loss=" << synced.loss
         << " buckets=" << model->stats().bucket_bytes.size() << " libtorch=" << TORCH_VERSION;
    std::cout << line.str() << std::endl;
  }
  group->barrier();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times data-parallel training steps with ddp (run under torchrun)."};
  Options options;
  app.add_option("--model", options.model, "linear (the torchrun tutorial's toy) or convnet")
      ->check(CLI::IsMember({"linear", "convnet"}));
  app.add_option("--steps", options.steps,
                 "timed steps per rank (default 2000 linear, 100 convnet)")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--warmup", options.warmup, "untimed steps first (default 100 linear, 10 convnet)")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--batch", options.batch, "batch size per rank (default 32 linear, 100 convnet)")
      ->check(CLI::Range(1, 100000));
  app.add_option("--data-dir", options.data_dir, "directory of the Fashion-MNIST idx files");
  app.add_option("--seed", options.seed, "seed of the data and of the shuffling");
  app.add_option("--backend", options.backend, "auto (shm on one node), shm or gloo");
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

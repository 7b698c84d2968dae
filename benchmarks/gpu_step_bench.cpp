// gpu_step_bench: ddp's side of benchmarks/gpu_vs_pytorch.sh. On one CUDA
// GPU it times training steps of every configuration asked for and prints
// one line per configuration:
//
//   result side=ddp model=resnet18 precision=bf16 mode=ddp batch=128 steps=150
//       step_ms=... images_per_s=... loss=... libtorch=...
//
//   build/bin/gpu_step_bench --models convnet,resnet18 --precisions fp32,bf16,fp16
//       --modes bare,ddp,ddp-full,ddp-view
//
// Models: the tutorial ConvNet and ResNet-18 (examples/common), on
// Fashion-MNIST held on the GPU. Precisions: fp32; bf16 and fp16 are
// mixed precision at O1 (autocast), fp16 with a GradScaler. Modes: bare
// (the model alone); ddp (DistributedDataParallel at world size 1 on NCCL,
// default options), whose difference is DDP's overhead; ddp-full, the same
// with the single-process shortcut off (the path of every rank at world
// size 2 and more: bucket copies, the NCCL all-reduce, the copies back);
// ddp-view, ddp-full with gradient_as_bucket_view; captured and
// captured-full, ddp and ddp-full with the whole step captured in a CUDA
// graph (ddp::CapturedStep; fp32 only: the GradScaler cannot be captured;
// ddp-view is run in fp32 only too).
// Each line also gives the peak of allocated GPU memory over the timed
// steps (peak_mib).
//
// Note [Same work as the Python side]
// benchmarks/pytorch_gpu_step_bench.py runs the same steps with PyTorch: SGD
// (lr 0.01, momentum 0.9; torch.optim.SGD takes its multi-tensor foreach
// form on CUDA by default, so ddp's side steps with ddp::optim::SGD, which
// makes the same foreach calls, bare and under DDP alike), cross entropy,
// batches taken with index_select from a permutation drawn per epoch by a
// CPU generator seeded with seed + epoch, models initialized from
// manual_seed(seed), cuDNN's autotuner on, TF32 left at PyTorch's defaults.
// The clock runs between two device synchronizations around the timed
// steps, after untimed warm-up.

#include <CLI/CLI.hpp>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <torch/version.h>
#ifdef USE_C10D_NCCL
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <chrono>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/models.hpp"
#include "common/resnet18.hpp"
#include "ddp/amp/mixed_precision.hpp"
#include "ddp/data/fashion_mnist.hpp"
#include "ddp/comm/environment.hpp"
#include "ddp/comm/errors.hpp"
#include "ddp/comm/init.hpp"
#include "ddp/parallel/distributed_data_parallel.hpp"
#include "ddp/amp/grad_scaler.hpp"
#include "ddp/parallel/captured_step.hpp"
#include "ddp/optim/sgd.hpp"

namespace {

struct Options {
  std::vector<std::string> models{"convnet", "resnet18"};
  std::vector<std::string> precisions{"fp32", "bf16", "fp16"};
  std::vector<std::string> modes{"bare",     "ddp",      "ddp-full",
                                 "ddp-view", "captured", "captured-full"};
  int convnet_steps = 300;
  int resnet_steps = 150;
  int warmup = 30;
  int convnet_batch = 256;
  int resnet_batch = 128;
  std::string data_dir = ddp::data::FashionMnist::kDefaultRoot;
  uint64_t seed = 0;
};

const c10::Device kGpu(c10::kCUDA, 0);

// Batches in the order of Note [Same work as the Python side].
class Batches {
 public:
  Batches(torch::Tensor images, torch::Tensor labels, int64_t batch, uint64_t seed)
      : images_(std::move(images)), labels_(std::move(labels)), batch_(batch), seed_(seed) {
    shuffle();
  }

  std::pair<torch::Tensor, torch::Tensor> next() {
    if (position_ + batch_ > order_.size(0)) {
      ++epoch_;
      shuffle();
    }
    auto index = order_.narrow(0, position_, batch_);
    position_ += batch_;
    return {images_.index_select(0, index), labels_.index_select(0, index)};
  }

 private:
  void shuffle() {
    auto generator = at::detail::createCPUGenerator(seed_ + epoch_);
    order_ = torch::randperm(images_.size(0), generator, torch::kLong).to(kGpu);
    position_ = 0;
  }

  torch::Tensor images_, labels_, order_;
  int64_t batch_;
  uint64_t seed_;
  uint64_t epoch_ = 0;
  int64_t position_ = 0;
};

struct Timed {
  double step_ms;
  double loss;
  double peak_mib;  // -1 where this build cannot read the allocator's statistics
};

// The allocator's peak of allocated bytes is reset after warm-up, so it is
// the peak of the timed steps: weights, optimizer state, gradients,
// buckets and activations.
void reset_peak_memory() {
#ifdef USE_C10D_NCCL
  c10::cuda::CUDACachingAllocator::resetPeakStats(kGpu.index());
#endif
}

double peak_memory_mib() {
#ifdef USE_C10D_NCCL
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(kGpu.index());
  // Entry 0 is StatType::AGGREGATE (both pools), in a namespace that moved
  // between LibTorch versions.
  return static_cast<double>(stats.allocated_bytes[0].peak) / (1024.0 * 1024.0);
#else
  return -1;
#endif
}

Timed run_configuration(const Options& options, const std::string& model_name,
                        const std::string& precision, const std::string& mode,
                        const torch::Tensor& images, const torch::Tensor& labels,
                        const std::shared_ptr<ddp::ProcessGroup>& group) {
  const bool resnet = model_name == "resnet18";
  torch::manual_seed(options.seed);
  torch::nn::AnyModule net = resnet ? torch::nn::AnyModule(ddp::examples::ResNet18())
                                    : torch::nn::AnyModule(ddp::examples::ConvNet());
  net.ptr()->to(kGpu);
  // PyTorch's SGD takes its foreach path on CUDA: ddp::optim::SGD is the
  // like-for-like C++ step (torch::optim::SGD makes its calls per parameter).
  ddp::optim::SGD optimizer(net.ptr()->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  std::unique_ptr<ddp::amp::MixedPrecision> mixed;
  std::unique_ptr<ddp::amp::GradScaler> scaler;
  if (precision != "fp32") {
    const auto dtype = precision == "bf16" ? torch::kBFloat16 : torch::kHalf;
    mixed = std::make_unique<ddp::amp::MixedPrecision>(
        *net.ptr(), optimizer, ddp::amp::AmpOptions(ddp::amp::OptLevel::kO1).dtype(dtype));
    if (precision == "fp16") scaler = std::make_unique<ddp::amp::GradScaler>();
  }
  std::unique_ptr<ddp::DistributedDataParallel> wrapped;
  const bool captured = mode == "captured" || mode == "captured-full";
  if (mode != "bare") {
    auto ddp_options = ddp::DistributedDataParallelOptions()
                           .single_process_shortcut(mode == "ddp" || mode == "captured")
                           .gradient_as_bucket_view(mode == "ddp-view");
    wrapped = std::make_unique<ddp::DistributedDataParallel>(net, ddp_options, group);
  }
  auto forward = [&](const torch::Tensor& x) {
    return wrapped ? (*wrapped)->forward(x) : net.forward(x);
  };

  Batches batches(images, labels, resnet ? options.resnet_batch : options.convnet_batch,
                  options.seed);
  torch::Tensor loss;
  auto train = [&](const torch::Tensor& x, const torch::Tensor& y) {
    if (!mixed) {
      optimizer.zero_grad();
      loss = torch::cross_entropy_loss(forward(x), y);
      loss.backward();
      optimizer.step();
      return;
    }
    mixed->zero_grad();
    torch::Tensor output;
    {
      auto guard = mixed->autocast();
      output = mixed->cast_output(forward(mixed->cast_input(x)));
    }
    loss = torch::cross_entropy_loss(output, y);
    if (scaler) {
      scaler->scale(loss).backward();
      mixed->step(*scaler);
      scaler->update();
    } else {
      loss.backward();
      mixed->step();
    }
  };
  // Captured: the batch is copied into static tensors, then the graph runs.
  torch::Tensor static_x, static_y;
  std::unique_ptr<ddp::CapturedStep> graph;
  if (captured) {
    auto [x, y] = batches.next();
    static_x = x.clone();
    static_y = y.clone();
    graph = std::make_unique<ddp::CapturedStep>([&] { train(static_x, static_y); });
  }
  auto step = [&] {
    auto [x, y] = batches.next();
    if (graph) {
      static_x.copy_(x);
      static_y.copy_(y);
      graph->run();
    } else {
      train(x, y);
    }
  };
  for (int i = 0; i < options.warmup; ++i) step();
  const int steps = resnet ? options.resnet_steps : options.convnet_steps;
  torch::cuda::synchronize();
  reset_peak_memory();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  torch::cuda::synchronize();
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {1e3 * seconds / steps, loss.item<double>(), peak_memory_mib()};
}

int run(const Options& options) {
  if (!torch::cuda::is_available()) {
    std::cerr << "error: no CUDA device is visible; gpu_step_bench needs a GPU "
                 "(and a CUDA build of LibTorch)\n";
    return 2;
  }
  at::globalContext().setBenchmarkCuDNN(true);
  ddp::data::FashionMnist train(options.data_dir);
  const torch::Tensor images = train.images().to(kGpu);
  const torch::Tensor labels = train.labels().to(kGpu);
  auto group =
      ddp::init(ddp::InitOptions().backend("nccl").rank(0).world_size(1), ddp::EnvironmentMap{});
  for (const auto& model : options.models) {
    for (const auto& precision : options.precisions) {
      for (const auto& mode : options.modes) {
        // Captured steps run in fp32 only; the bucket-view row (for the
        // memory table) too, to keep a round short.
        if ((mode.rfind("captured", 0) == 0 || mode == "ddp-view") && precision != "fp32") continue;
        const Timed timed =
            run_configuration(options, model, precision, mode, images, labels, group);
        const int batch = model == "resnet18" ? options.resnet_batch : options.convnet_batch;
        const int steps = model == "resnet18" ? options.resnet_steps : options.convnet_steps;
        std::ostringstream line;
        line.setf(std::ios::fixed);
        line.precision(4);
        line << "result side=ddp model=" << model << " precision=" << precision << " mode=" << mode
             << " batch=" << batch << " steps=" << steps << " step_ms=" << timed.step_ms
             << " images_per_s=" << 1e3 * batch / timed.step_ms << " loss=" << timed.loss
             << " peak_mib=" << timed.peak_mib << " libtorch=" << TORCH_VERSION;
        std::cout << line.str() << std::endl;
      }
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Times training steps on one GPU with ddp (bare model and DDP at world size 1)."};
  Options options;
  app.add_option("--models", options.models, "convnet, resnet18")
      ->delimiter(',')
      ->check(CLI::IsMember({"convnet", "resnet18"}));
  app.add_option("--precisions", options.precisions, "fp32, bf16, fp16 (O1 autocast)")
      ->delimiter(',')
      ->check(CLI::IsMember({"fp32", "bf16", "fp16"}));
  app.add_option("--modes", options.modes,
                 "bare (the model alone), ddp (DDP on NCCL), ddp-full (the shortcut off), "
                 "ddp-view (ddp-full with gradient_as_bucket_view), captured, captured-full "
                 "(ddp, ddp-full in a CUDA graph; fp32 only)")
      ->delimiter(',')
      ->check(CLI::IsMember({"bare", "ddp", "ddp-full", "ddp-view", "captured", "captured-full"}));
  app.add_option("--convnet-steps", options.convnet_steps, "timed ConvNet steps")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--resnet-steps", options.resnet_steps, "timed ResNet-18 steps")
      ->check(CLI::Range(1, 1000000));
  app.add_option("--warmup", options.warmup, "untimed steps first")->check(CLI::Range(0, 1000000));
  app.add_option("--convnet-batch", options.convnet_batch, "ConvNet batch size")
      ->check(CLI::Range(1, 60000));
  app.add_option("--resnet-batch", options.resnet_batch, "ResNet-18 batch size")
      ->check(CLI::Range(1, 60000));
  app.add_option("--data-dir", options.data_dir, "directory of the Fashion-MNIST files");
  app.add_option("--seed", options.seed, "seed of the weights and of the shuffling");
  CLI11_PARSE(app, argc, argv);
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

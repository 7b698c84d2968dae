// gpu_step_bench: ddp's side of benchmarks/gpu_vs_pytorch.sh. On one CUDA
// GPU it times training steps of every configuration asked for and prints
// one line per configuration:
//
//   result side=ddp model=resnet18 precision=bf16 mode=ddp batch=128 steps=150
//       step_ms=... images_per_s=... loss=... peak_mib=... broadcast_buffers=0 libtorch=...
//
//   build/bin/gpu_step_bench --models convnet,resnet18 --precisions fp32,bf16,fp16
//       --modes bare,ddp,ddp-full,ddp-view
//
// Models: the tutorial ConvNet and ResNet-18 (examples/common), on
// Fashion-MNIST held on the GPU. Precisions: fp32; bf16 and fp16 are
// mixed precision at O1 (autocast), fp16 with a GradScaler. Modes: bare
// (the model alone); ddp (DistributedDataParallel at world size 1 on NCCL,
// with the single-process shortcut: no collective at all); ddp-full, the
// same with the shortcut off (the path of every rank at world size 2 and
// more: bucket copies, the NCCL all-reduce, the copies back), which
// benchmarks/gpu_vs_pytorch.sh compares with PyTorch's DDP; ddp-view,
// ddp-full with gradient_as_bucket_view; captured and captured-full, ddp
// and ddp-full with the whole step captured in a CUDA graph
// (ddp::CapturedStep; fp32 only: the GradScaler cannot be captured;
// ddp-view is run in fp32 only too). Every DDP mode has broadcast_buffers
// off, as the PyTorch side (Note [Buffers broadcast on neither side]).
// Each line also gives the peak of allocated GPU memory over the timed
// steps (peak_mib).
//
// --profile PATH (one configuration only) then profiles --profile-steps
// more steps with LibTorch's Kineto profiler (CPU and CUDA activities),
// writes the Chrome trace to PATH and prints the operators and kernels that
// took the most device time and the most CPU time, with their counts.
// --device cpu runs the same loops on the CPU (Gloo for DDP), a smoke test
// for a machine without a GPU.
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
//
// Note [Buffers broadcast on neither side]
// PyTorch's DDP broadcasts the module's buffers (BatchNorm's running
// statistics; both models have BatchNorm) from rank 0 at every forward by
// default, even at world size 1, where the broadcast is an NCCL call that
// changes nothing. ddp's DDP skips it at world size 1 whatever its
// options. For the same work on both sides, both are built with
// broadcast_buffers off: at world size 1 this changes nothing on ddp's side
// and removes PyTorch's per-forward broadcast. At world size 2 and more,
// with the default broadcast_buffers on, both sides would add that
// broadcast to every step; this benchmark does not measure it.

#include <torch/csrc/autograd/profiler_kineto.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <torch/version.h>
#include <CLI/CLI.hpp>
#ifdef USE_C10D_NCCL
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <map>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/models.hpp"
#include "common/resnet18.hpp"
#include "ddp/amp/grad_scaler.hpp"
#include "ddp/amp/mixed_precision.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/environment.hpp"
#include "ddp/comm/init.hpp"
#include "ddp/data/fashion_mnist.hpp"
#include "ddp/optim/sgd.hpp"
#include "ddp/parallel/captured_step.hpp"
#include "ddp/parallel/distributed_data_parallel.hpp"

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
  std::string device = "cuda";
  std::string profile;  // the Chrome trace's path; empty: no profile
  int profile_steps = 20;
};

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
    order_ = torch::randperm(images_.size(0), generator, torch::kLong).to(images_.device());
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
  double peak_mib;  // -1 on the CPU, or where this build cannot read the allocator's statistics
};

void synchronize(const c10::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize(device.index());
}

// The allocator's peak of allocated bytes is reset after warm-up, so it is
// the peak of the timed steps: weights, optimizer state, gradients,
// buckets and activations.
void reset_peak_memory(const c10::Device& device) {
#ifdef USE_C10D_NCCL
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#endif
}

double peak_memory_mib(const c10::Device& device) {
#ifdef USE_C10D_NCCL
  if (!device.is_cuda()) return -1;
  const auto stats = c10::cuda::CUDACachingAllocator::getDeviceStats(device.index());
  // Entry 0 is StatType::AGGREGATE (both pools), in a namespace that moved
  // between LibTorch versions.
  return static_cast<double>(stats.allocated_bytes[0].peak) / (1024.0 * 1024.0);
#else
  return -1;
#endif
}

// --- The profile (--profile).

namespace kineto = torch::autograd::profiler;

// An event's start and duration in ns. LibTorch 1.13's KinetoEvent counts
// in µs (startUs, durationUs); 2.x counts in ns (startNs, durationNs; 2.6
// and 2.11 have only these).
struct Span {
  int64_t start_ns;
  int64_t duration_ns;
};

Span span_of(const kineto::KinetoEvent& event) {
#if TORCH_VERSION_MAJOR < 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR < 1)
  return {static_cast<int64_t>(event.startUs()) * 1000,
          static_cast<int64_t>(event.durationUs()) * 1000};
#else
  return {static_cast<int64_t>(event.startNs()), static_cast<int64_t>(event.durationNs())};
#endif
}

// libkineto::ActivityType's values (the same in every LibTorch here; its
// header is not installed with every LibTorch): what KinetoEvent's
// activityType() returns.
constexpr uint8_t kCpuOp = 0;              // an operator (ATen, autograd, ...)
constexpr uint8_t kGpuUserAnnotation = 2;  // a CPU range mirrored on the GPU: not device work

struct Row {
  std::string name;
  int64_t count = 0;
  int64_t total_ns = 0;
  int64_t self_ns = 0;
};

std::vector<Row> top(std::map<std::string, Row> rows, bool by_self, size_t n) {
  std::vector<Row> sorted;
  for (auto& [name, row] : rows) sorted.push_back(std::move(row));
  std::sort(sorted.begin(), sorted.end(), [by_self](const Row& a, const Row& b) {
    return by_self ? a.self_ns > b.self_ns : a.total_ns > b.total_ns;
  });
  if (sorted.size() > n) sorted.resize(n);
  return sorted;
}

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

std::string shorten(const std::string& name, size_t width) {
  return name.size() <= width ? name : name.substr(0, width - 3) + "...";
}

// The tables of --profile: device work (kernels, copies, memsets) by total
// time; CPU events by self time (an operator's time less that of the
// operators it called on the same thread; a CUDA runtime call is its own
// row and also part of its operator's self time).
void print_profile(const kineto::ProfilerResult& result, int steps, double wall_ms) {
  std::map<std::string, Row> device_rows, cpu_rows;
  struct OperatorSpan {
    uint64_t thread;
    Span span;
    std::string name;
  };
  std::vector<OperatorSpan> operators;
  int64_t device_ns = 0, kernels = 0;
  for (const auto& event : result.events()) {
    const Span span = span_of(event);
    const std::string name = event.name();
    if (event.deviceType() == c10::DeviceType::CUDA) {
      if (event.activityType() == kGpuUserAnnotation) continue;
      auto& row = device_rows[name];
      row.name = name;
      ++row.count;
      row.total_ns += span.duration_ns;
      row.self_ns += span.duration_ns;
      device_ns += span.duration_ns;
      ++kernels;
      continue;
    }
    if (event.deviceType() != c10::DeviceType::CPU) continue;
    auto& row = cpu_rows[name];
    row.name = name;
    ++row.count;
    row.total_ns += span.duration_ns;
    row.self_ns += span.duration_ns;
    if (event.activityType() == kCpuOp) operators.push_back({event.startThreadId(), span, name});
  }
  // Self time: on each thread, an operator that starts and ends inside
  // another is its child; the parent's self time loses the child's duration.
  std::sort(operators.begin(), operators.end(), [](const OperatorSpan& a, const OperatorSpan& b) {
    if (a.thread != b.thread) return a.thread < b.thread;
    if (a.span.start_ns != b.span.start_ns) return a.span.start_ns < b.span.start_ns;
    return a.span.duration_ns > b.span.duration_ns;
  });
  std::vector<const OperatorSpan*> open;
  int64_t top_level = 0;
  for (const auto& op : operators) {
    const int64_t end = op.span.start_ns + op.span.duration_ns;
    while (!open.empty() && (open.back()->thread != op.thread ||
                             open.back()->span.start_ns + open.back()->span.duration_ns < end)) {
      open.pop_back();
    }
    if (open.empty()) {
      ++top_level;
    } else {
      cpu_rows[open.back()->name].self_ns -= op.span.duration_ns;
    }
    open.push_back(&op);
  }
  auto per_step = [steps](double value) { return value / steps; };
  std::printf("profile: %d steps, %.3f ms per step with the profiler on\n", steps,
              per_step(wall_ms));
  std::printf(
      "profile: per step %.1f device events (kernels, copies, memsets), %.3f ms of device time, "
      "%.1f operators (%.1f top-level ones)\n",
      per_step(static_cast<double>(kernels)), per_step(static_cast<double>(device_ns)) / 1e6,
      per_step(static_cast<double>(operators.size())), per_step(static_cast<double>(top_level)));
  std::printf("\nTop 15 by total device (CUDA) time, over the %d profiled steps\n", steps);
  std::printf("%-70s %8s %9s %11s %10s %7s\n", "kernel / copy", "count", "per step", "total ms",
              "avg us", "share");
  for (const auto& row : top(device_rows, false, 15)) {
    std::printf("%-70s %8lld %9.1f %11.3f %10.2f %6.1f%%\n", shorten(row.name, 70).c_str(),
                static_cast<long long>(row.count), per_step(static_cast<double>(row.count)),
                static_cast<double>(row.total_ns) / 1e6,
                static_cast<double>(row.total_ns) / 1e3 / static_cast<double>(row.count),
                device_ns > 0
                    ? 100.0 * static_cast<double>(row.total_ns) / static_cast<double>(device_ns)
                    : 0.0);
  }
  if (device_rows.empty()) std::printf("(no device events: no CUDA activity was recorded)\n");
  std::printf("\nTop 15 by self CPU time, over the %d profiled steps\n", steps);
  std::printf("%-50s %8s %9s %11s %11s %10s\n", "operator / runtime call", "count", "per step",
              "self ms", "total ms", "avg us");
  for (const auto& row : top(cpu_rows, true, 15)) {
    std::printf("%-50s %8lld %9.1f %11.3f %11.3f %10.2f\n", shorten(row.name, 50).c_str(),
                static_cast<long long>(row.count), per_step(static_cast<double>(row.count)),
                static_cast<double>(row.self_ns) / 1e6, static_cast<double>(row.total_ns) / 1e6,
                static_cast<double>(row.total_ns) / 1e3 / static_cast<double>(row.count));
  }
  std::fflush(stdout);
}

// Profiles `steps` calls of `step` with the Kineto profiler, saves the
// Chrome trace to `path` and prints the tables.
template <typename Step>
void profile_steps(const Options& options, const c10::Device& device, Step&& step) {
  using torch::profiler::impl::ActivityType;
  using torch::profiler::impl::ProfilerConfig;
  using torch::profiler::impl::ProfilerState;
  std::set<ActivityType> activities{ActivityType::CPU};
  if (device.is_cuda()) activities.insert(ActivityType::CUDA);
  const ProfilerConfig config(ProfilerState::KINETO);
  kineto::prepareProfiler(config, activities);
  synchronize(device);
  kineto::enableProfiler(config, activities);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < options.profile_steps; ++i) step();
  synchronize(device);
  const double wall_ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  const std::unique_ptr<kineto::ProfilerResult> result = kineto::disableProfiler();
  try {
    result->save(options.profile);
    std::printf("profile: Chrome trace written to %s\n", options.profile.c_str());
  } catch (const std::exception& e) {
    // LibTorch built without Kineto (Debian's 1.13) keeps the events but
    // cannot write a trace.
    std::printf("profile: no trace written (%s)\n", first_line(e.what()).c_str());
  }
  print_profile(*result, options.profile_steps, wall_ms);
}

Timed run_configuration(const Options& options, const std::string& model_name,
                        const std::string& precision, const std::string& mode,
                        const torch::Tensor& images, const torch::Tensor& labels,
                        const std::shared_ptr<ddp::ProcessGroup>& group) {
  const c10::Device device = images.device();
  const bool resnet = model_name == "resnet18";
  torch::manual_seed(options.seed);
  torch::nn::AnyModule net = resnet ? torch::nn::AnyModule(ddp::examples::ResNet18())
                                    : torch::nn::AnyModule(ddp::examples::ConvNet());
  net.ptr()->to(device);
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
    // Note [Buffers broadcast on neither side].
    auto ddp_options = ddp::DistributedDataParallelOptions()
                           .broadcast_buffers(false)
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
  synchronize(device);
  reset_peak_memory(device);
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < steps; ++i) step();
  synchronize(device);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const Timed timed{1e3 * seconds / steps, loss.item<double>(), peak_memory_mib(device)};
  // After the timed steps, so that the profiler's cost is in no timing.
  if (!options.profile.empty()) profile_steps(options, device, step);
  return timed;
}

int run(const Options& options) {
  const bool cuda = options.device == "cuda";
  if (cuda && !torch::cuda::is_available()) {
    std::cerr << "error: no CUDA device is visible; gpu_step_bench needs a GPU "
                 "(and a CUDA build of LibTorch), or --device cpu for a smoke test\n";
    return 2;
  }
  if (!options.profile.empty() &&
      options.models.size() * options.precisions.size() * options.modes.size() != 1) {
    std::cerr << "error: --profile profiles one configuration: give one each of --models, "
                 "--precisions and --modes\n";
    return 2;
  }
  const c10::Device device = cuda ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
  if (cuda) at::globalContext().setBenchmarkCuDNN(true);
  ddp::data::FashionMnist train(options.data_dir);
  const torch::Tensor images = train.images().to(device);
  const torch::Tensor labels = train.labels().to(device);
  auto group = ddp::init(ddp::InitOptions().backend(cuda ? "nccl" : "gloo").rank(0).world_size(1),
                         ddp::EnvironmentMap{});
  for (const auto& model : options.models) {
    for (const auto& precision : options.precisions) {
      for (const auto& mode : options.modes) {
        // Captured steps run in fp32 only; the bucket-view row (for the
        // memory table) too, to keep a round short.
        if ((mode.rfind("captured", 0) == 0 || mode == "ddp-view") && precision != "fp32") continue;
        if (mode.rfind("captured", 0) == 0 && !cuda) continue;
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
             << " peak_mib=" << timed.peak_mib << " broadcast_buffers=0"
             << " libtorch=" << TORCH_VERSION;
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
                 "bare (the model alone), ddp (DDP on NCCL with the single-process shortcut), "
                 "ddp-full (the shortcut off), ddp-view (ddp-full with gradient_as_bucket_view), "
                 "captured, captured-full (ddp, ddp-full in a CUDA graph; fp32 only); "
                 "buffers are never broadcast")
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
  app.add_option("--device", options.device, "cuda, or cpu for a smoke test (Gloo for DDP)")
      ->check(CLI::IsMember({"cuda", "cpu"}));
  app.add_option("--profile", options.profile,
                 "after the timed steps of the one configuration given, profile more steps with "
                 "the Kineto profiler, write its Chrome trace to this path and print the top "
                 "operators and kernels");
  app.add_option("--profile-steps", options.profile_steps, "steps profiled (20)")
      ->check(CLI::Range(1, 100000));
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

// data_parallel_bench: step time of ddp::DataParallel (replicas kept across
// steps) against LibTorch's data-parallel algorithm (replicas cloned at every
// step), on the same model, data and devices, alternating in one process.
// Not a test: benchmarks/data_parallel_bench.sh runs it over a matrix and
// prints a table.
//
// Note [LibTorch's side without CUDA]
// torch/nn/parallel/data_parallel.h includes CUDA headers (through
// torch/csrc/autograd/functions/comm.h), so a CPU-only LibTorch such as Debian's cannot
// even compile it, let alone link data_parallel()'s Scatter and Gather. The
// LibTorch side therefore runs data_parallel()'s steps with the public calls
// they are made of: the input split with chunk() (Scatter), a deep clone of
// the module per device and per step with Module::clone(device) (what
// replicate() does), the replicas' forwards under at::parallel_for (what
// parallel_apply() does), cat() onto the output device (Gather), and after
// backward the replicas' gradients summed into the module's (what
// replicate()'s ReduceAdd edges do during backward). With one device it
// calls the module directly, as data_parallel() does.

#include <torch/torch.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <iomanip>
#include <iostream>
#include <string>
#include <vector>

#include "ddp/parallel/data_parallel.hpp"

namespace {

namespace nn = torch::nn;

struct MlpImpl : nn::Cloneable<MlpImpl> {
  MlpImpl() { reset(); }
  void reset() override {
    fc1 = register_module("fc1", nn::Linear(784, 512));
    fc2 = register_module("fc2", nn::Linear(512, 512));
    fc3 = register_module("fc3", nn::Linear(512, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    return fc3(torch::relu(fc2(torch::relu(fc1(x.reshape({x.size(0), -1}))))));
  }
  nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};
TORCH_MODULE(Mlp);

// The DDP tutorial's ConvNet (examples/common/models.hpp), Cloneable so that
// both sides can replicate it.
struct ConvNetImpl : nn::Cloneable<ConvNetImpl> {
  ConvNetImpl() { reset(); }
  void reset() override {
    layer1 =
        register_module("layer1", nn::Sequential(nn::Conv2d(nn::Conv2dOptions(1, 16, 5).padding(2)),
                                                 nn::BatchNorm2d(16), nn::ReLU(),
                                                 nn::MaxPool2d(nn::MaxPool2dOptions(2).stride(2))));
    layer2 = register_module(
        "layer2",
        nn::Sequential(nn::Conv2d(nn::Conv2dOptions(16, 32, 5).padding(2)), nn::BatchNorm2d(32),
                       nn::ReLU(), nn::MaxPool2d(nn::MaxPool2dOptions(2).stride(2))));
    fc = register_module("fc", nn::Linear(7 * 7 * 32, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = layer2->forward(layer1->forward(x));
    return fc->forward(x.reshape({x.size(0), -1}));
  }
  nn::Sequential layer1{nullptr}, layer2{nullptr};
  nn::Linear fc{nullptr};
};
TORCH_MODULE(ConvNet);

struct Options {
  std::string model = "mlp";
  int replicas = 2;
  int threads = 1;
  int batch = 0;  // 0: the model's default
  int steps = 30;
  int warmup = 5;
  int rounds = 5;
  bool balanced = false;
};

// One training step on each side: zero_grad, forward, loss, backward, step.
template <typename Model>
class Side {
 public:
  Side(Model model, const std::vector<c10::Device>& devices, bool persistent, bool balanced)
      : model_(std::move(model)),
        devices_(devices),
        optimizer_(model_->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9)) {
    if (persistent) {
      dp_ = ddp::DataParallel(
          model_, ddp::DataParallelOptions().devices(devices).balanced_memory(balanced));
    }
  }

  void step(const torch::Tensor& x, const torch::Tensor& y) {
    optimizer_.zero_grad();
    if (dp_ && dp_->options().balanced_memory()) {
      // The loss per replica, and each replica's backward on its thread.
      dp_->forward_backward(x, y, [](const torch::Tensor& out, const torch::Tensor& target) {
        return torch::nll_loss(torch::log_softmax(out, 1), target);
      });
    } else {
      torch::nll_loss(torch::log_softmax(forward(x), 1), y).backward();
      sum_replica_gradients();
    }
    optimizer_.step();
  }

  std::vector<torch::Tensor> parameters() const { return model_->parameters(); }

 private:
  torch::Tensor forward(const torch::Tensor& x) {
    if (dp_) return dp_->forward(x);
    if (devices_.size() == 1) return model_->forward(x);
    auto chunks = x.chunk(static_cast<int64_t>(devices_.size()), 0);
    clones_.clear();
    for (size_t i = 0; i < chunks.size(); ++i) {
      clones_.push_back(
          std::dynamic_pointer_cast<typename Model::Impl>(model_->clone(devices_[i])));
    }
    std::vector<torch::Tensor> outputs(chunks.size());
    at::parallel_for(0, static_cast<int64_t>(chunks.size()), 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) outputs[i] = clones_[i]->forward(chunks[i]);
    });
    return torch::cat(outputs, 0);
  }

  void sum_replica_gradients() {
    torch::NoGradGuard no_grad;
    auto primary = model_->parameters();
    for (const auto& clone : clones_) {
      auto theirs = clone->parameters();
      for (size_t j = 0; j < primary.size(); ++j) {
        if (!theirs[j].grad().defined()) continue;
        if (primary[j].grad().defined()) {
          primary[j].mutable_grad().add_(theirs[j].grad());
        } else {
          primary[j].mutable_grad() = theirs[j].grad().clone();
        }
      }
    }
    clones_.clear();
  }

  Model model_;
  std::vector<c10::Device> devices_;
  torch::optim::SGD optimizer_;
  ddp::DataParallel dp_{nullptr};
  std::vector<std::shared_ptr<typename Model::Impl>> clones_;
};

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return values[values.size() / 2];
}

template <typename Model>
int run(const Options& options, std::vector<int64_t> sample_shape, int default_batch) {
  const int batch = options.batch > 0 ? options.batch : default_batch;
  std::vector<c10::Device> devices(options.replicas, c10::Device(c10::kCPU));
  torch::manual_seed(0);
  Model ours_model;
  torch::manual_seed(0);
  Model theirs_model;
  Side<Model> ours(ours_model, devices, /*persistent=*/true, options.balanced);
  Side<Model> theirs(theirs_model, devices, /*persistent=*/false, /*balanced=*/false);

  sample_shape.insert(sample_shape.begin(), batch);
  std::vector<std::pair<torch::Tensor, torch::Tensor>> batches;
  for (int i = 0; i < 8; ++i) {
    batches.emplace_back(torch::randn(sample_shape), torch::randint(0, 10, {batch}));
  }
  auto time = [&](auto& side, int steps, int offset) {
    const auto start = std::chrono::steady_clock::now();
    for (int s = 0; s < steps; ++s) {
      const auto& [x, y] = batches[(offset + s) % batches.size()];
      side.step(x, y);
    }
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
               .count() /
           steps;
  };
  time(ours, options.warmup, 0);
  time(theirs, options.warmup, 0);
  std::vector<double> ours_ms, theirs_ms;
  for (int round = 0; round < options.rounds; ++round) {
    const int offset = options.warmup + round * options.steps;
    // Alternate which side goes first, so that neither always meets the
    // machine in the state the other left it.
    if (round % 2 == 0) {
      ours_ms.push_back(time(ours, options.steps, offset));
      theirs_ms.push_back(time(theirs, options.steps, offset));
    } else {
      theirs_ms.push_back(time(theirs, options.steps, offset));
      ours_ms.push_back(time(ours, options.steps, offset));
    }
  }
  double difference = 0;
  auto a = ours.parameters(), b = theirs.parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    difference = std::max(difference, (a[i] - b[i]).abs().max().template item<double>());
  }
  const double ours_median = median(ours_ms), theirs_median = median(theirs_ms);
  std::cout << std::fixed << std::setprecision(2) << "| " << options.model << " | " << batch
            << " | " << options.replicas << " | " << options.threads << " | "
            << (options.balanced ? "forward_backward, balanced" : "forward + backward") << " | "
            << ours_median << " | " << theirs_median << " | **" << theirs_median / ours_median
            << "** | " << std::scientific << std::setprecision(1) << difference << " |"
            << std::endl;
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app{"ddp::DataParallel against LibTorch's data-parallel steps, CPU replicas"};
  app.add_option("--model", options.model, "mlp or convnet")
      ->check(CLI::IsMember({"mlp", "convnet"}));
  app.add_option("--replicas", options.replicas, "CPU replicas (kCPU repeated)")
      ->check(CLI::Range(1, 16));
  app.add_option("--threads", options.threads, "intra-op threads (at::set_num_threads)")
      ->check(CLI::Range(1, 64));
  app.add_option("--batch", options.batch, "global batch (default: mlp 128, convnet 64)");
  app.add_option("--steps", options.steps, "timed steps per round");
  app.add_option("--warmup", options.warmup, "untimed steps first");
  app.add_option("--rounds", options.rounds, "rounds, alternating the two sides; medians shown");
  app.add_flag("--balanced", options.balanced,
               "ddp side: forward_backward() with balanced_memory (backward per replica thread)");
  CLI11_PARSE(app, argc, argv);
  at::set_num_threads(options.threads);
  if (options.model == "mlp") return run<Mlp>(options, {784}, 128);
  return run<ConvNet>(options, {1, 28, 28}, 64);
}

// CapturedStep on CUDA (gpu_checks.hpp: check_captured_step): captured and
// replayed DDP training steps against the same steps run eagerly.

#include <torch/torch.h>

#include <string>
#include <vector>

#include "common/models.hpp"
#include "common/resnet18.hpp"
#include "ddp/amp/grad_scaler.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/parallel/captured_step.hpp"
#include "ddp/parallel/distributed_data_parallel.hpp"
#include "gpu/gpu_checks.hpp"

namespace ddp::testing {
namespace {

constexpr int kWarmup = 11;
constexpr int kCaptured = 20;

struct Trained {
  std::vector<at::Tensor> parameters;
  std::vector<double> losses;  // per step
  bool captured = false;
  std::string error;
};

// kWarmup + kCaptured steps of SGD with momentum on batches drawn the same
// way for both runs; `captured` runs them through a CapturedStep (the first
// kWarmup eagerly, the rest replayed).
Trained train(const std::string& model_name, bool shortcut, bool captured,
              const std::shared_ptr<ProcessGroup>& group) {
  const bool resnet = model_name == "resnet18";
  const int64_t batch = resnet ? 32 : 64;
  torch::manual_seed(5);
  torch::nn::AnyModule net = resnet ? torch::nn::AnyModule(examples::ResNet18())
                                    : torch::nn::AnyModule(examples::ConvNet());
  net.ptr()->to(kGpu);
  DistributedDataParallel model(
      net, DistributedDataParallelOptions().single_process_shortcut(shortcut), group);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  const at::Tensor x = torch::empty({batch, 1, 28, 28}, torch::device(kGpu));
  const at::Tensor y = torch::empty({batch}, torch::device(kGpu).dtype(torch::kLong));
  const at::Tensor loss = torch::zeros({}, torch::device(kGpu));
  auto step = [&] {
    optimizer.zero_grad();
    const at::Tensor l = torch::cross_entropy_loss(model->forward(x), y);
    l.backward();
    optimizer.step();
    loss.copy_(l.detach());
  };
  Trained result;
  try {
    std::unique_ptr<CapturedStep> graph;
    if (captured) {
      graph = std::make_unique<CapturedStep>(step, CapturedStepOptions().warmup_steps(kWarmup));
    }
    for (int i = 0; i < kWarmup + kCaptured; ++i) {
      torch::manual_seed(1000 + i);
      x.copy_(torch::randn({batch, 1, 28, 28}, torch::device(kGpu)));
      y.copy_(torch::randint(0, 10, {batch}, torch::device(kGpu).dtype(torch::kLong)));
      if (graph) {
        graph->run();
      } else {
        step();
      }
      result.losses.push_back(loss.item<double>());
    }
    result.captured = graph && graph->captured();
  } catch (const std::exception& e) {
    result.error = e.what();
  }
  for (const auto& p : net.ptr()->parameters()) result.parameters.push_back(p.detach().clone());
  return result;
}

void check_model(const std::string& model_name, bool shortcut,
                 const std::shared_ptr<ProcessGroup>& group, NamedChecks& checks) {
  const std::string name =
      "captured " + model_name + (shortcut ? " alone" : " with the nccl all-reduce");
  const Trained eager = train(model_name, shortcut, false, group);
  const Trained replayed = train(model_name, shortcut, true, group);
  checks.check(name + " was captured", replayed.captured && replayed.error.empty(),
               replayed.error.empty() ? "run() never captured" : "threw: " + replayed.error);
  checks.close_all(name + " parameters after " + std::to_string(kCaptured) + " replays",
                   replayed.parameters, eager.parameters, 1e-6, replayed.error);
  double worst = 0;
  for (size_t i = 0; i < eager.losses.size() && i < replayed.losses.size(); ++i) {
    worst = std::max(worst, std::abs(replayed.losses[i] - eager.losses[i]) /
                                std::max(std::abs(eager.losses[i]), 1e-12));
  }
  checks.check(name + " losses per step",
               replayed.losses.size() == eager.losses.size() && worst <= 1e-6,
               std::to_string(replayed.losses.size()) + " losses, worst relative difference " +
                   std::to_string(worst));
}

void check_scaler_refused(const std::shared_ptr<ProcessGroup>& group, NamedChecks& checks) {
  torch::manual_seed(5);
  examples::ConvNet net;
  net->to(kGpu);
  DistributedDataParallel model(net, group);
  torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.01));
  amp::GradScaler scaler;
  const at::Tensor x = torch::randn({16, 1, 28, 28}, torch::device(kGpu));
  const at::Tensor y = torch::randint(0, 10, {16}, torch::device(kGpu).dtype(torch::kLong));
  CapturedStep step(
      [&] {
        optimizer.zero_grad();
        scaler.scale(torch::cross_entropy_loss(model->forward(x), y)).backward();
        scaler.step(optimizer);
        scaler.update();
      },
      CapturedStepOptions().warmup_steps(2));
  std::string message;
  bool typed = false;
  try {
    for (int i = 0; i < 3; ++i) step.run();
  } catch (const InvalidArgumentError& e) {
    typed = true;
    message = e.what();
  } catch (const std::exception& e) {
    message = e.what();
  }
  checks.check(
      "captured grad scaler refused with a named error",
      typed && message.find("GradScaler::step inside a captured step") != std::string::npos,
      "message: '" + message + "'");
  checks.check("captured grad scaler warm-up steps ran", step.steps() == 2,
               std::to_string(step.steps()) + " steps");
  torch::cuda::synchronize();
}

}  // namespace

void check_captured_step(const std::shared_ptr<ProcessGroup>& group, NamedChecks& checks) {
  // The same kernels in both runs: no autotuning, no TF32.
  at::globalContext().setBenchmarkCuDNN(false);
  at::globalContext().setDeterministicCuDNN(true);
  at::globalContext().setAllowTF32CuDNN(false);
  at::globalContext().setAllowTF32CuBLAS(false);
  for (const char* model : {"convnet", "resnet18"}) {
    for (bool shortcut : {true, false}) check_model(model, shortcut, group, checks);
  }
  check_scaler_refused(group, checks);
}

std::vector<std::string> captured_step_checks() {
  std::vector<std::string> names;
  for (const char* model : {"convnet", "resnet18"}) {
    for (const char* how : {" alone", " with the nccl all-reduce"}) {
      const std::string name = std::string("captured ") + model + how;
      names.push_back(name + " was captured");
      names.push_back(name + " parameters after " + std::to_string(kCaptured) + " replays");
      names.push_back(name + " losses per step");
    }
  }
  names.push_back("captured grad scaler refused with a named error");
  names.push_back("captured grad scaler warm-up steps ran");
  return names;
}

}  // namespace ddp::testing

// DDP steps on CUDA that never make the host wait for the GPU
// (gpu_checks.hpp: check_host_never_waits).
//
// Note [Two ways to wait for the GPU]
// A step can stall the host on the GPU in two ways.
// 1. A synchronizing CUDA call: a stream or device synchronization, a copy
//    to the host, item(). CUDA's sync debug mode
//    (c10::cuda::warning_state().set_sync_debug_mode) turns each such call
//    made through LibTorch into an error (L_ERROR) or a warning (L_WARN),
//    which these checks count.
// 2. Polling: a wait that loops on an event query until the GPU is done, as
//    c10d's WorkNCCL::wait(timeout) does, makes no synchronizing call and
//    passes the debug mode unseen. So each configuration also runs a step
//    queued behind a GPU kernel that spins for about half a second: if the
//    host is back from the step while that kernel still runs, nothing in the
//    step waited for the GPU.

#include "gpu/gpu_checks.hpp"

#ifdef USE_C10D_NCCL
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/util/Exception.h>
#endif
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>

#include "common/models.hpp"
#include "ddp/amp/grad_scaler.hpp"
#include "ddp/parallel/comm_hook.hpp"
#include "ddp/parallel/distributed_data_parallel.hpp"
#include "ddp/parallel/zero_redundancy_optimizer.hpp"

namespace ddp::testing {

#ifdef USE_C10D_NCCL
namespace {

const c10::Device kGpu(c10::kCUDA, 0);
// About half a second of spinning on a 1.5-2 GHz GPU.
constexpr int64_t kSpinCycles = 1'000'000'000;

/// Counts the warnings of CUDA's sync debug mode while alive.
class SyncCounter final : public c10::WarningHandler {
 public:
  SyncCounter() : previous_(c10::WarningUtils::get_warning_handler()) {
    c10::WarningUtils::set_warning_handler(this);
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_WARN);
  }
  ~SyncCounter() override {
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
    c10::WarningUtils::set_warning_handler(previous_);
  }
  void process(const c10::Warning& warning) override {
    if (warning.msg().find("synchronizing") != std::string::npos) ++count;
  }
  int count = 0;

 private:
  c10::WarningHandler* previous_;
};

/// One training step of a configuration.
using Step = std::function<void()>;

struct Trainer {
  std::string name;
  Step step;
  /// Synchronizing calls a step may make (Note [Inherent synchronizations]).
  int allowed_per_step = 0;
  std::shared_ptr<void> keep_alive;  // the model and optimizer `step` uses
};

// Note [Inherent synchronizations]
// Two features decide on the host what the next kernels are, from values
// the GPU computed, and so must wait for them once per step:
// find_unused_parameters learns from every rank which parameters got a
// gradient (an all-reduce of a host table), and the GradScaler learns
// whether any gradient overflowed before it steps or skips. Everything
// else in a step is enqueued without waiting.

struct Batch {
  at::Tensor x, y;
};

Batch batch() {
  return {torch::randn({64, 1, 28, 28}, torch::device(kGpu)),
          torch::randint(0, 10, {64}, torch::device(kGpu).dtype(torch::kLong))};
}

struct DdpSetup {
  examples::ConvNet net;
  DistributedDataParallel model;
  torch::optim::SGD optimizer;
  Batch data = batch();
  DdpSetup(const std::shared_ptr<ProcessGroup>& group, DistributedDataParallelOptions options)
      : net(make()),
        model(net, std::move(options), group),
        optimizer(model->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9)) {}
  static examples::ConvNet make() {
    torch::manual_seed(3);
    examples::ConvNet net;
    net->to(kGpu);
    return net;
  }
  void backward() { torch::cross_entropy_loss(model->forward(data.x), data.y).backward(); }
};

Trainer ddp_trainer(const std::shared_ptr<ProcessGroup>& group, const std::string& name,
                    DistributedDataParallelOptions options) {
  auto setup = std::make_shared<DdpSetup>(group, std::move(options));
  return {name,
          [s = setup.get()] {
            s->optimizer.zero_grad();
            s->backward();
            s->optimizer.step();
          },
          0, setup};
}

Trainer no_sync_trainer(const std::shared_ptr<ProcessGroup>& group, const std::string& name,
                        DistributedDataParallelOptions options) {
  auto setup = std::make_shared<DdpSetup>(group, std::move(options));
  return {name,
          [s = setup.get()] {
            s->optimizer.zero_grad();
            {
              auto guard = s->model->no_sync();
              s->backward();
            }
            s->backward();
            s->optimizer.step();
          },
          0, setup};
}

Trainer unused_trainer(const std::shared_ptr<ProcessGroup>& group, const std::string& name,
                       DistributedDataParallelOptions options) {
  Trainer trainer = ddp_trainer(group, name, options.find_unused_parameters(true));
  trainer.allowed_per_step = 1;
  return trainer;
}

Trainer scaler_trainer(const std::shared_ptr<ProcessGroup>& group, const std::string& name,
                       DistributedDataParallelOptions options) {
  struct State {
    DdpSetup setup;
    amp::GradScaler scaler;
    State(const std::shared_ptr<ProcessGroup>& group, DistributedDataParallelOptions options)
        : setup(group, std::move(options)), scaler(amp::GradScalerOptions(), group) {}
  };
  auto state = std::make_shared<State>(group, std::move(options));
  return {name,
          [s = state.get()] {
            s->setup.optimizer.zero_grad();
            s->scaler
                .scale(torch::cross_entropy_loss(s->setup.model->forward(s->setup.data.x),
                                                 s->setup.data.y))
                .backward();
            s->scaler.step(s->setup.optimizer);
            s->scaler.update();
          },
          1, state};
}

Trainer zero_trainer(const std::shared_ptr<ProcessGroup>& group, int stage) {
  struct State {
    examples::ConvNet net = DdpSetup::make();
    std::unique_ptr<DistributedDataParallel> model;
    std::unique_ptr<ZeroRedundancyOptimizer> optimizer;
    Batch data = batch();
  };
  auto state = std::make_shared<State>();
  if (stage == 1) {
    state->model = std::make_unique<DistributedDataParallel>(
        state->net, DistributedDataParallelOptions().single_process_shortcut(false), group);
  }
  state->optimizer = std::make_unique<ZeroRedundancyOptimizer>(
      state->net->parameters(),
      zero_optimizer<torch::optim::SGD>(torch::optim::SGDOptions(0.01).momentum(0.9)),
      ZeroRedundancyOptimizerOptions().stage(stage), group);
  return {"zero stage " + std::to_string(stage),
          [s = state.get()] {
            s->optimizer->zero_grad();
            const at::Tensor output =
                s->model ? (*s->model)->forward(s->data.x) : s->net->forward(s->data.x);
            torch::cross_entropy_loss(output, s->data.y).backward();
            s->optimizer->step();
          },
          0, state};
}

void check_trainer(Trainer& trainer, NamedChecks& checks) {
  // Warm-up: the first iteration rebuilds the buckets (and records the
  // static graph), which waits for the GPU once; cuDNN picks its kernels.
  for (int i = 0; i < 3; ++i) trainer.step();
  torch::cuda::synchronize();

  constexpr int kSteps = 3;
  int synchronizations = 0;
  {
    SyncCounter counter;
    for (int i = 0; i < kSteps; ++i) trainer.step();
    synchronizations = counter.count;
  }
  checks.check(trainer.name + " synchronizing calls per step",
               synchronizations <= trainer.allowed_per_step * kSteps,
               std::to_string(synchronizations) + " in " + std::to_string(kSteps) +
                   " steps, at most " + std::to_string(trainer.allowed_per_step) + " per step");

  if (trainer.allowed_per_step == 0) {
    std::string error;
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_ERROR);
    try {
      trainer.step();
    } catch (const std::exception& e) {
      error = e.what();
    }
    c10::cuda::warning_state().set_sync_debug_mode(c10::cuda::SyncDebugMode::L_DISABLED);
    checks.check(trainer.name + " passes in sync debug mode error", error.empty(),
                 "threw: " + error.substr(0, error.find('\n')));

    at::cuda::sleep(kSpinCycles);
    at::cuda::CUDAEvent spun;
    spun.record();
    trainer.step();
    const bool host_ahead = !spun.query();
    torch::cuda::synchronize();
    checks.check(trainer.name + " host returns before the GPU is done", host_ahead,
                 "the step returned only after a kernel queued before it had finished: "
                 "something in the step waited for the GPU");
  }
  torch::cuda::synchronize();
}

}  // namespace

void check_host_never_waits(const std::shared_ptr<ProcessGroup>& group, NamedChecks& checks) {
  const auto full = [] { return DistributedDataParallelOptions().single_process_shortcut(false); };
  std::vector<std::function<Trainer()>> trainers = {
      [&] { return ddp_trainer(group, "ddp alone", DistributedDataParallelOptions()); },
      [&] { return ddp_trainer(group, "ddp", full()); },
      [&] { return ddp_trainer(group, "ddp bucket view", full().gradient_as_bucket_view(true)); },
      [&] { return ddp_trainer(group, "ddp static graph", full().static_graph(true)); },
      [&] { return no_sync_trainer(group, "ddp no_sync", full()); },
      [&] { return ddp_trainer(group, "ddp fp16 hook", full().comm_hook(fp16_compress_hook())); },
      [&] { return ddp_trainer(group, "ddp bf16 hook", full().comm_hook(bf16_compress_hook())); },
      [&] { return unused_trainer(group, "ddp find_unused_parameters", full()); },
      [&] { return scaler_trainer(group, "ddp grad scaler", full()); },
      [&] { return zero_trainer(group, 1); },
      [&] { return zero_trainer(group, 2); },
  };
  for (auto& make : trainers) {
    Trainer trainer = make();
    check_trainer(trainer, checks);
  }
}

std::vector<std::string> host_never_waits_checks() {
  std::vector<std::string> names;
  for (const char* name : {"ddp alone", "ddp", "ddp bucket view", "ddp static graph", "ddp no_sync",
                           "ddp fp16 hook", "ddp bf16 hook", "zero stage 1", "zero stage 2"}) {
    const std::string n = name;
    names.push_back(n + " synchronizing calls per step");
    names.push_back(n + " passes in sync debug mode error");
    names.push_back(n + " host returns before the GPU is done");
  }
  names.push_back("ddp find_unused_parameters synchronizing calls per step");
  names.push_back("ddp grad scaler synchronizing calls per step");
  return names;
}

#else

void check_host_never_waits(const std::shared_ptr<ProcessGroup>& /*group*/, NamedChecks& checks) {
  checks.check("built with CUDA", false,
               "this build of ddp has no CUDA LibTorch; the host-sync checks need one");
}

std::vector<std::string> host_never_waits_checks() { return {"built with CUDA"}; }

#endif

}  // namespace ddp::testing

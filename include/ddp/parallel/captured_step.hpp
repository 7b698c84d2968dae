#pragma once

/// \file captured_step.hpp
/// CapturedStep: a whole training step (forward, backward with
/// DistributedDataParallel's all-reduces, the optimizer's step) captured
/// once in a CUDA graph after a few eager steps, then replayed: one launch
/// per step instead of hundreds of kernel launches from the host.
///
/// \code
///   auto x = torch::empty({256, 1, 28, 28}, gpu);   // static inputs:
///   auto y = torch::empty({256}, gpu.dtype(torch::kLong));  // filled each step
///   auto loss = torch::zeros({}, gpu);
///   ddp::CapturedStep step([&] {
///     optimizer.zero_grad();
///     auto l = torch::cross_entropy_loss(model->forward(x), y);
///     l.backward();
///     optimizer.step();
///     loss.copy_(l.detach());
///   });
///   for (auto& [images, labels] : batches) {
///     x.copy_(images);
///     y.copy_(labels);
///     step.run();   // eager while warming up, then one graph replay
///   }
/// \endcode
///
/// Note [What a captured step may do]
/// A CUDA graph replays the GPU work recorded while the step ran once; the
/// host side of the step does not run again. So the step must read its
/// inputs from tensors whose storage stays the same (fill them before each
/// run()), must not wait for the GPU on the host (no item(), no copy to the
/// host; GradScaler::step is refused with InvalidArgumentError), and must
/// keep every value that changes from step to step on the GPU: SGD (with
/// momentum, weight decay, Nesterov) does; LibTorch's Adam and AdamW count
/// their steps on the host, so their bias correction would stay that of the
/// capturing step. DistributedDataParallel's collectives go into the graph
/// (NCCL); its host-side bookkeeping (stats(), the flight recorder) sees the
/// warm-up and capturing steps only. Tensors the step allocates (the
/// gradients, the loss) live in the graph's memory pool and are rewritten by
/// every replay.

#include <torch/arg.h>

#include <cstdint>
#include <functional>
#include <memory>

namespace ddp::parallel {

/// Options of CapturedStep.
struct CapturedStepOptions {
  /// Eager steps before the capture, run on a side stream as CUDA graphs
  /// require: DistributedDataParallel's first iteration rebuilds its
  /// buckets, cuDNN picks its kernels, the optimizer makes its state.
  /// PyTorch's recipe for DDP asks for 11.
  TORCH_ARG(int64_t, warmup_steps) = 11;
};

/// One training step, run eagerly `warmup_steps` times, then captured in a
/// CUDA graph and replayed (Note [What a captured step may do]).
class CapturedStep {
 public:
  /// \throws ConfigError where this build of ddp has no CUDA, no CUDA
  ///   device is visible, or warmup_steps is below 1.
  explicit CapturedStep(std::function<void()> step, CapturedStepOptions options = {});
  ~CapturedStep();
  CapturedStep(const CapturedStep&) = delete;
  CapturedStep& operator=(const CapturedStep&) = delete;

  /// Runs one step on the current CUDA stream: eagerly while warming up;
  /// the first step after warm-up captures the graph and replays it once;
  /// later ones replay it.
  /// \throws whatever the step throws while warming up or capturing (a
  ///   failed capture leaves nothing captured and is not retried).
  void run();
  /// Whether the graph is captured (run() now replays it).
  bool captured() const noexcept;
  /// Steps run so far, eager ones included.
  int64_t steps() const noexcept { return steps_; }

 private:
  struct Graph;
  std::function<void()> step_;
  CapturedStepOptions options_;
  std::unique_ptr<Graph> graph_;
  int64_t steps_ = 0;
};

/// Whether the calling thread is capturing a CapturedStep: code that would
/// wait for the GPU on the host checks it and refuses with a named error.
bool capturing_step() noexcept;

}  // namespace ddp::parallel

namespace ddp {
using namespace parallel;  // Note [One namespace per layer] in ddp/ddp.hpp
}  // namespace ddp

// CapturedStep (ddp/parallel/captured_step.hpp). Compiled with DDP_WITH_CUDA where
// LibTorch has CUDA; elsewhere the constructor refuses with ConfigError.

#include "ddp/parallel/captured_step.hpp"

#include <string>

#include "base/str.hpp"
#include "ddp/base/errors.hpp"

#ifdef DDP_WITH_CUDA
#include <ATen/cuda/CUDAEvent.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#endif

namespace ddp::parallel {
namespace {

thread_local bool capturing = false;

// Clears `capturing` however the capture ends.
struct CapturingScope {
  CapturingScope() { capturing = true; }
  ~CapturingScope() { capturing = false; }
  CapturingScope(const CapturingScope&) = delete;
  CapturingScope& operator=(const CapturingScope&) = delete;
};

}  // namespace

bool capturing_step() noexcept { return capturing; }

#ifdef DDP_WITH_CUDA

struct CapturedStep::Graph {
  // Note [A side stream for warm-up and capture]
  // CUDA cannot capture the legacy default stream, and PyTorch's allocator
  // keeps the memory of work warmed up on one stream for that stream. So
  // warm-up and capture both run on one side stream taken from the pool,
  // ordered after the caller's stream by an event, and the caller's stream
  // waits for the side stream's work before continuing.
  c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
  at::cuda::CUDAGraph graph;
  bool captured = false;
  bool failed = false;

  template <typename Work>
  void on_side_stream(Work&& work) {
    const c10::cuda::CUDAStream caller = c10::cuda::getCurrentCUDAStream();
    at::cuda::CUDAEvent ready;
    ready.record(caller);
    ready.block(side);
    {
      c10::cuda::CUDAStreamGuard guard(side);
      work();
    }
    at::cuda::CUDAEvent done;
    done.record(side);
    done.block(caller);
  }
};

CapturedStep::CapturedStep(std::function<void()> step, CapturedStepOptions options)
    : step_(std::move(step)), options_(options) {
  if (options_.warmup_steps() < 1) {
    throw ConfigError(
        base::detail::str("CapturedStep: warmup_steps is ", options_.warmup_steps(),
                          "; it must be at least 1 (DistributedDataParallel rebuilds its buckets "
                          "in the first step; PyTorch's recipe warms up 11)"));
  }
  if (c10::cuda::device_count() == 0) {
    throw ConfigError(
        "CapturedStep: no CUDA device is visible to this process; a captured step replays a "
        "CUDA graph. Run on a GPU, or call the step directly on the CPU.");
  }
  graph_ = std::make_unique<Graph>();
}

void CapturedStep::run() {
  Graph& g = *graph_;
  if (g.captured) {
    g.graph.replay();
    ++steps_;
    return;
  }
  if (g.failed) {
    throw InvalidArgumentError(
        "CapturedStep: the capture failed in an earlier run(); construct a new CapturedStep after "
        "fixing the step (Note [What a captured step may do] in ddp/parallel/captured_step.hpp)");
  }
  if (steps_ < options_.warmup_steps()) {
    g.on_side_stream(step_);
    ++steps_;
    return;
  }
  g.on_side_stream([&] {
    CapturingScope scope;
    // Note [Capturing in thread-local mode]
    // c10d's NCCL watchdog thread queries the events of collectives while a
    // step is captured; in CUDA's global capture mode a query from another
    // thread invalidates the capture. In thread-local mode only this
    // thread's unsafe calls do; the autograd engine's kernels still go to
    // the captured stream, which is what is captured.
    g.graph.capture_begin({0, 0}, cudaStreamCaptureModeThreadLocal);
    try {
      step_();
    } catch (...) {
      g.failed = true;
      try {
        g.graph.capture_end();  // ends the stream's capture; the graph is discarded
      } catch (...) {
      }
      throw;
    }
    g.graph.capture_end();
  });
  g.captured = true;
  g.graph.replay();  // capturing ran nothing
  ++steps_;
}

#else

struct CapturedStep::Graph {
  bool captured = false;
};

CapturedStep::CapturedStep(std::function<void()> step, CapturedStepOptions options)
    : step_(std::move(step)), options_(options) {
  throw ConfigError(
      "CapturedStep: this build of ddp has no CUDA (LibTorch without CUDA); a captured step "
      "replays a CUDA graph. Build ddp against a CUDA LibTorch, or call the step directly.");
}

void CapturedStep::run() {}

#endif

CapturedStep::~CapturedStep() = default;

bool CapturedStep::captured() const noexcept { return graph_ && graph_->captured; }

}  // namespace ddp::parallel

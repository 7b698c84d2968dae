#pragma once

// The MFU line of an example's summary: the model FLOPs of a step (three
// times its first forward's, counted by ddp::training::FlopCounter: MFU's
// convention, so that recompute under checkpointing is not model work),
// every rank's steps, over the training time (the epochs, evaluation left
// out) and the machine's peak, measured by rank 0 at the end while the
// other ranks wait (ddp::training::measure_machine_peak(group)). On a GPU the CPU's peak is no
// denominator: the line says so.

#include <torch/torch.h>

#include <cstdio>
#include <string>
#include <utility>

#include "ddp/comm/process_group.hpp"
#include "ddp/training/flop_counter.hpp"
#include "ddp/training/machine_peak.hpp"
#include "ddp/training/progress.hpp"

namespace ddp::examples {

class TrainingUtilization {
 public:
  explicit TrainingUtilization(const torch::Device& device) : on_cpu_(device.is_cpu()) {}

  /// Runs `forward` and returns its result; the first call's matrix
  /// products are counted (as ran on this thread and those that take over
  /// its state).
  template <typename Forward>
  auto forward(Forward&& forward) {
    if (step_flops_ >= 0) return forward();
    ddp::training::FlopCounter counter;
    auto out = forward();
    step_flops_ = 3 * counter.flops();
    return out;
  }

  /// Adds an epoch's steps and time.
  void add_epoch(const ddp::training::EpochProgress& done) {
    steps_ += done.steps;
    seconds_ += done.seconds;
  }

  /// "MFU 41.2% (...)" on rank 0, "" on the others; a collective over
  /// `group`, whose ranks all ran the same steps.
  std::string summary(ddp::ProcessGroup& group) {
    if (!on_cpu_)
      return group.rank() == 0 ? "MFU: not measured on a GPU (the CPU's peak is no denominator)"
                               : "";
    const ddp::training::MachinePeak peak = ddp::training::measure_machine_peak(group);
    if (group.rank() != 0 || steps_ == 0 || seconds_ <= 0 || step_flops_ <= 0) return "";
    const auto& topology = group.topology();
    const int nodes = std::max(1, topology.world_size / std::max(1, topology.local_world_size));
    const double flops = step_flops_ * static_cast<double>(steps_) * group.size();
    char text[240];
    std::snprintf(
        text, sizeof(text),
        "MFU %.1f%%: %.3g model FLOPs in %.1f s of training on %d x %d cores of %.0f "
        "GFLOP/s (sgemm, one core)",
        100 * ddp::training::model_flops_utilization(flops, seconds_, peak, peak.cores * nodes),
        flops, seconds_, nodes, peak.cores, peak.sgemm_gflops_per_core);
    return text;
  }

 private:
  bool on_cpu_;
  double step_flops_ = -1;  // -1: not counted yet
  int64_t steps_ = 0;
  double seconds_ = 0;
};

}  // namespace ddp::examples

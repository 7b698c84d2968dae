#pragma once

// MFU and the optimizer's share of bandwidth, as every training benchmark
// prints them (issue 70): the machine's peak measured by rank 0 while the
// other ranks wait (ddp::training::measure_machine_peak(group)), the model
// FLOPs counted by a
// ddp::training::FlopCounter over one forward, tripled for the backward
// (MFU's convention: recompute is not model work).

#include <torch/torch.h>

#include <cstdio>
#include <string>

#include "ddp/ddp.hpp"
#include "ddp/training/flop_counter.hpp"
#include "ddp/training/machine_peak.hpp"

namespace ddp_bench {

/// "mfu=..% peak_gflops_per_core=.. cores=.." for `model_flops` (every
/// rank's) done in `seconds` on this machine's cores.
inline std::string mfu_fields(double model_flops, double seconds,
                              const ddp::training::MachinePeak& peak) {
  char text[160];
  std::snprintf(
      text, sizeof(text), "model_flops=%.4g mfu=%.1f%% peak_gflops_per_core=%.1f cores=%d",
      model_flops,
      100 * ddp::training::model_flops_utilization(model_flops, seconds, peak, peak.cores),
      peak.sgemm_gflops_per_core, peak.cores);
  return text;
}

/// "optimizer_bandwidth=..%": an Adam step's bytes (4 arrays of `elements`
/// read, 3 written; 4 bytes an element) over `seconds` against one core's
/// memory bandwidth (the step runs on one thread a rank).
inline std::string adam_bandwidth_field(int64_t elements, double seconds,
                                        const ddp::training::MachinePeak& peak) {
  char text[64];
  std::snprintf(text, sizeof(text), "optimizer_bandwidth=%.0f%%",
                100 * ddp::training::bandwidth_utilization(28.0 * static_cast<double>(elements),
                                                           seconds, peak));
  return text;
}

/// The elements an optimizer steps (its parameters').
inline int64_t optimizer_elements(const torch::optim::Optimizer& optimizer) {
  int64_t n = 0;
  for (const auto& group : optimizer.param_groups())
    for (const auto& p : group.params()) n += p.numel();
  return n;
}

}  // namespace ddp_bench

#include "ddp/training/machine_peak.hpp"

#include <ATen/Parallel.h>
#include <sched.h>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>

#include "base/str.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"

namespace ddp::training {
namespace {

/// The best of `reps` timings of `f`, in seconds.
template <typename F>
double best_seconds(int reps, F&& f) {
  double best = 1e30;
  for (int i = 0; i < reps; ++i) {
    const auto start = std::chrono::steady_clock::now();
    f();
    best = std::min(
        best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return best;
}

int affinity_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return 1;
  return std::max(CPU_COUNT(&set), 1);
}

void check_rate(const char* what, double amount, double seconds, const MachinePeak& peak,
                double per_core) {
  if (!(amount >= 0) || !(seconds > 0) || !(per_core > 0)) {
    throw ConfigError(base::detail::str(what, ": needs amount >= 0 (got ", amount,
                                        "), seconds > 0 (got ", seconds, ") and a measured peak (",
                                        per_core, " per core, ", peak.cores,
                                        " cores); take the peak from measure_machine_peak()"));
  }
}

}  // namespace

MachinePeak measure_machine_peak() {
  const torch::NoGradGuard no_grad;
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  MachinePeak peak;
  peak.cores = affinity_cores();
  {
    const int64_t n = 1024;
    const at::Tensor a = torch::full({n, n}, 0.5f), b = torch::full({n, n}, 0.25f);
    at::Tensor c = torch::mm(a, b);
    peak.sgemm_gflops_per_core =
        2.0 * n * n * n / best_seconds(5, [&] { at::mm_out(c, a, b); }) / 1e9;
  }
  {
    const int64_t n = int64_t{1} << 24;  // 64 MiB an array
    at::Tensor a = torch::full({n}, 1.f);
    const at::Tensor b = torch::full({n}, 0.f);  // a stays finite however often it runs
    a.add_(b, 3);
    peak.memory_gbs_per_core = 12.0 * n / best_seconds(8, [&] { a.add_(b, 3); }) / 1e9;
  }
  at::set_num_threads(threads);
  return peak;
}

MachinePeak measure_machine_peak(comm::ProcessGroup& group) {
  MachinePeak peak;
  group.barrier();
  if (group.rank() == 0) peak = measure_machine_peak();
  // The broadcast holds the other ranks until rank 0 has measured.
  const at::Tensor figures = torch::tensor(
      {peak.sgemm_gflops_per_core, peak.memory_gbs_per_core, static_cast<double>(peak.cores)},
      torch::kFloat64);
  group.broadcast(figures, 0);
  peak.sgemm_gflops_per_core = figures[0].item<double>();
  peak.memory_gbs_per_core = figures[1].item<double>();
  peak.cores = static_cast<int>(figures[2].item<double>());
  return peak;
}

double model_flops_utilization(double flops, double seconds, const MachinePeak& peak, int cores) {
  check_rate("model_flops_utilization", flops, seconds, peak, peak.sgemm_gflops_per_core);
  if (cores < 1) {
    throw ConfigError(base::detail::str("model_flops_utilization: cores must be >= 1, got ", cores,
                                        "; pass the cores the ranks ran on"));
  }
  return flops / (seconds * peak.sgemm_gflops_per_core * 1e9 * cores);
}

double bandwidth_utilization(double bytes, double seconds, const MachinePeak& peak) {
  check_rate("bandwidth_utilization", bytes, seconds, peak, peak.memory_gbs_per_core);
  return bytes / (seconds * peak.memory_gbs_per_core * 1e9);
}

}  // namespace ddp::training

// allreduce_bench: one rank of benchmarks/allreduce_bench.sh. Times float32
// sum all-reduces of 4 KiB to 256 MiB through two engines in the same run,
// Gloo and ddp's shared-memory engine, and rank 0 prints one row per size:
// latency (time per all-reduce) and bus bandwidth (algbw x 2(n-1)/n, the
// figure NCCL's tests report, comparable across rank counts).
//
//   ddprun --standalone --nproc-per-node 2 build/bin/allreduce_bench

#include <ATen/ATen.h>
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>

#include "ddp/errors.hpp"
#include "ddp/init.hpp"
#include "launch/child_process.hpp"

namespace {

// Seconds per all-reduce on the slowest rank: `iterations` back to back
// after a warm-up, the ranks aligned by a barrier first.
double timeAllReduce(ddp::ProcessGroup& engine, ddp::ProcessGroup& control, const at::Tensor& t,
                     int iterations) {
  for (int i = 0; i < 3; ++i) engine.all_reduce(t);
  control.barrier();
  const auto start = std::chrono::steady_clock::now();
  for (int i = 0; i < iterations; ++i) engine.all_reduce(t);
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / iterations;
  at::Tensor slowest = at::full({1}, seconds, at::kDouble);
  control.all_reduce(slowest, ddp::ReduceOp::kMax);
  return slowest.item<double>();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Times all-reduce through Gloo and through shared memory (run under ddprun).");
  int64_t min_bytes = 4 << 10;
  int64_t max_bytes = int64_t{256} << 20;
  double budget_s = 0.25;
  app.add_option("--min-bytes", min_bytes, "smallest message");
  app.add_option("--max-bytes", max_bytes, "largest message");
  app.add_option("--seconds-per-size", budget_s, "rough time spent per size and engine");
  CLI11_PARSE(app, argc, argv);
  try {
    auto gloo = ddp::init(ddp::InitOptions().backend("gloo"));
    // The second group meets at a port rank 0 picks and broadcasts.
    at::Tensor port = at::full({1}, gloo->rank() == 0 ? ddp::launch::findFreePort() : 0, at::kInt);
    gloo->broadcast(port, 0);
    auto shm = ddp::init(ddp::InitOptions().backend("shm").master_port(port.item<int>()));
    const int n = gloo->size();
    const double bus_factor = n > 1 ? 2.0 * (n - 1) / n : 0.0;
    if (gloo->rank() == 0) {
      std::printf("ranks=%d\n%10s %14s %14s %14s %14s %9s %9s\n", n, "bytes", "gloo us", "shm us",
                  "gloo busbw GB/s", "shm busbw GB/s", "bw ratio", "lat ratio");
    }
    for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
      at::Tensor t = at::ones({bytes / 4}, at::kFloat);
      // Calibrate on Gloo (the slower engine), the same count on all ranks.
      const double probe = timeAllReduce(*gloo, *gloo, t, 2);
      const int iterations = static_cast<int>(std::max(3.0, std::min(5000.0, budget_s / probe)));
      const double gloo_s = timeAllReduce(*gloo, *gloo, t, iterations);
      const double shm_s = timeAllReduce(*shm, *gloo, t, iterations);
      if (gloo->rank() == 0) {
        const double gloo_bw = bytes / gloo_s * bus_factor / 1e9;
        const double shm_bw = bytes / shm_s * bus_factor / 1e9;
        std::printf("%10lld %14.1f %14.1f %14.3f %14.3f %9.2f %9.2f\n",
                    static_cast<long long>(bytes), gloo_s * 1e6, shm_s * 1e6, gloo_bw, shm_bw,
                    shm_bw / gloo_bw, gloo_s / shm_s);
        std::fflush(stdout);
      }
    }
    return 0;
  } catch (const ddp::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return static_cast<int>(ddp::exit_code_for(e));
  }
}

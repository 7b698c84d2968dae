// allreduce_bench: one rank of benchmarks/allreduce_bench.sh (and of the
// all-reduce runs of benchmarks/cluster_bench.sh). Times sum all-reduces of
// 4 KiB to 256 MiB (float32, or --dtype float16/bfloat16) through several
// engines in the same run (default: Gloo and ddp's shared-memory engine),
// and rank 0 prints one row per size: latency (time per all-reduce) and bus
// bandwidth (algbw x 2(n-1)/n, the figure NCCL's tests report, comparable
// across rank counts).
//
//   ddprun --standalone --nproc-per-node 2 build/bin/allreduce_bench

#include <ATen/ATen.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "ddp/errors.hpp"
#include "ddp/init.hpp"
#include "launch/child_process.hpp"

namespace {

// Note [The median of five batches]
// This machine is a VM on a shared host: now and then a vCPU is descheduled
// for a millisecond or more, and a rank that waits for a descheduled peer
// waits that long. One such pause in a run of 100 all-reduces of 20 us
// doubles their mean. So the calls are timed in five batches, each batch
// taken on its slowest rank, and the median batch is reported: a pause
// spoils one batch, not the figure. Every engine is timed the same way.
constexpr int kBatches = 5;

// Seconds per all-reduce: `iterations` back to back after a warm-up, in
// kBatches batches aligned by a barrier; the median of the batches' times
// on their slowest rank.
double timeAllReduce(ddp::ProcessGroup& engine, ddp::ProcessGroup& control, const at::Tensor& t,
                     int iterations) {
  for (int i = 0; i < 3; ++i) engine.all_reduce(t);
  const int per_batch = std::max(1, iterations / kBatches);
  std::vector<double> batches;
  for (int b = 0; b < kBatches; ++b) {
    control.barrier();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < per_batch; ++i) engine.all_reduce(t);
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / per_batch;
    at::Tensor slowest = at::full({1}, seconds, at::kDouble);
    control.all_reduce(slowest, ddp::ReduceOp::kMax);
    batches.push_back(slowest.item<double>());
  }
  std::sort(batches.begin(), batches.end());
  return batches[kBatches / 2];
}

// A comma-separated list of engines, each once, each one ddp::init knows.
std::vector<std::string> parseEngines(const std::string& list) {
  std::vector<std::string> engines;
  std::stringstream in(list);
  for (std::string engine; std::getline(in, engine, ',');) {
    if (engine != "gloo" && engine != "shm" && engine != "auto") {
      throw ddp::ConfigError("unknown engine '" + engine + "' in --engines " + list +
                             ": use gloo, shm or auto (shm on one node, the hierarchical engine "
                             "across nodes), comma-separated");
    }
    if (std::find(engines.begin(), engines.end(), engine) != engines.end()) {
      throw ddp::ConfigError("engine '" + engine + "' is listed twice in --engines " + list);
    }
    engines.push_back(engine);
  }
  if (engines.empty()) throw ddp::ConfigError("--engines is empty: name gloo, shm or auto");
  return engines;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Times all-reduce through ddp's engines (run under ddprun).");
  int64_t min_bytes = 4 << 10;
  int64_t max_bytes = int64_t{256} << 20;
  double budget_s = 0.25;
  std::string engine_list = "gloo,shm";
  std::string dtype_name = "float32";
  app.add_option("--min-bytes", min_bytes, "smallest message");
  app.add_option("--max-bytes", max_bytes, "largest message");
  app.add_option("--seconds-per-size", budget_s, "rough time spent per size and engine");
  app.add_option("--engines", engine_list,
                 "engines to time, comma-separated (gloo, shm, auto); with two, the ratios "
                 "compare the second against the first");
  app.add_option("--dtype", dtype_name, "element type: float32, float16 or bfloat16 (sum)")
      ->check(CLI::IsMember({"float32", "float16", "bfloat16"}));
  CLI11_PARSE(app, argc, argv);
  const at::ScalarType dtype = dtype_name == "float16"    ? at::kHalf
                               : dtype_name == "bfloat16" ? at::kBFloat16
                                                          : at::kFloat;
  try {
    const std::vector<std::string> names = parseEngines(engine_list);
    // Gloo is always opened: it times its own rows and aligns the ranks.
    auto gloo = ddp::init(ddp::InitOptions().backend("gloo"));
    std::vector<std::shared_ptr<ddp::ProcessGroup>> engines;
    for (const auto& name : names) {
      if (name == "gloo") {
        engines.push_back(gloo);
        continue;
      }
      // Every further group meets at a port rank 0 picks and broadcasts.
      at::Tensor port =
          at::full({1}, gloo->rank() == 0 ? ddp::launch::findFreePort() : 0, at::kInt);
      gloo->broadcast(port, 0);
      engines.push_back(ddp::init(ddp::InitOptions().backend(name).master_port(port.item<int>())));
    }
    const int n = gloo->size();
    const double bus_factor = n > 1 ? 2.0 * (n - 1) / n : 0.0;
    const bool ratios = engines.size() == 2;
    if (gloo->rank() == 0) {
      std::printf("ranks=%d dtype=%s\n%10s", n, dtype_name.c_str(), "bytes");
      for (const auto& name : names) std::printf(" %14s", (name + " us").c_str());
      for (const auto& name : names) std::printf(" %14s", (name + " busbw GB/s").c_str());
      if (ratios) std::printf(" %9s %9s", "bw ratio", "lat ratio");
      std::printf("\n");
    }
    for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
      at::Tensor t = at::ones({bytes / static_cast<int64_t>(c10::elementSize(dtype))}, dtype);
      // Calibrate on Gloo (the slowest engine), the same count on all ranks.
      const double probe = timeAllReduce(*gloo, *gloo, t, 2);
      const int iterations =
          static_cast<int>(std::max(double{kBatches}, std::min(5000.0, budget_s / probe)));
      std::vector<double> seconds;
      for (const auto& engine : engines)
        seconds.push_back(timeAllReduce(*engine, *gloo, t, iterations));
      if (gloo->rank() == 0) {
        std::printf("%10lld", static_cast<long long>(bytes));
        for (double s : seconds) std::printf(" %14.1f", s * 1e6);
        for (double s : seconds) std::printf(" %14.3f", bytes / s * bus_factor / 1e9);
        // The bus bandwidths' ratio equals the latencies' (same bytes).
        if (ratios) std::printf(" %9.2f %9.2f", seconds[0] / seconds[1], seconds[0] / seconds[1]);
        std::printf("\n");
        std::fflush(stdout);
      }
    }
    return 0;
  } catch (const ddp::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return static_cast<int>(ddp::exit_code_for(e));
  }
}

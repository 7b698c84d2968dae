// allreduce_bench: one rank of benchmarks/allreduce_bench.sh (and of the
// all-reduce runs of benchmarks/cluster_bench.sh). Times sum all-reduces of
// 4 KiB to 256 MiB (float32, or --dtype float16/bfloat16) through several
// backends in the same run (default: Gloo and ddp's shared-memory backend),
// and rank 0 prints one row per size: latency (time per all-reduce) and bus
// bandwidth (algbw x 2(n-1)/n, the figure NCCL's tests report, comparable
// across rank counts). With --idle-us, it then times the smallest size after
// the caller spun for each of those gaps (Note [An all-reduce after idle time]
// in benchmarks/cost_model.py).
//
//   ddprun --standalone --nproc-per-node 2 build/bin/allreduce_bench

#include <ATen/ATen.h>
#include <sched.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "ddp/base/errors.hpp"
#include "ddp/comm/init.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/launch/child_process.hpp"
#include "ddp/launch/port_reservation.hpp"
#include "timing.hpp"

namespace {

// Note [The median of five batches]
// This machine is a VM on a shared host: now and then a vCPU is descheduled
// for a millisecond or more, and a rank that waits for a descheduled peer
// waits that long. One such pause in a run of 100 all-reduces of 20 us
// doubles their mean. So the calls are timed in five batches, each batch
// taken on its slowest rank, and the median batch is reported: a pause
// spoils one batch, not the figure. Every backend is timed the same way.
constexpr int kBatches = 5;

using ddp_bench::Clock;
using ddp_bench::median;
using ddp_bench::spin;

// Seconds per all-reduce in one batch of `calls`, aligned by a barrier, each
// call after `idle_s` of spinning (subtracted again), on the slowest rank.
double time_batch(ddp::ProcessGroup& backend, ddp::ProcessGroup& control, const at::Tensor& t,
                  int calls, double idle_s) {
  control.barrier();
  const auto start = Clock::now();
  for (int i = 0; i < calls; ++i) {
    if (idle_s > 0) spin(std::chrono::duration<double>(idle_s));
    backend.all_reduce(t);
  }
  const double seconds = std::chrono::duration<double>(Clock::now() - start).count() / calls;
  at::Tensor slowest = at::full({1}, seconds - idle_s, at::kDouble);
  control.all_reduce(slowest, ddp::ReduceOp::kMax);
  return slowest.item<double>();
}

// Seconds per all-reduce: `iterations` back to back after a warm-up, in
// kBatches batches; the median batch.
double time_all_reduce(ddp::ProcessGroup& backend, ddp::ProcessGroup& control, const at::Tensor& t,
                       int iterations) {
  for (int i = 0; i < 3; ++i) backend.all_reduce(t);
  std::vector<double> batches;
  for (int b = 0; b < kBatches; ++b)
    batches.push_back(time_batch(backend, control, t, std::max(1, iterations / kBatches), 0));
  return median(batches);
}

// Note [Idle gaps interleaved]
// A small all-reduce's latency drifts by 30% from one minute to the next on
// this VM, more than what an idle gap adds to it (0.1-0.5 ms of 1.5). Timed
// one gap after another, the extra came out in no order (+58, +283, +57,
// +853 us at 10, 30, 100, 300 us). So the gaps, 0 (back to back) included,
// take turns: kIdleRounds rounds of one batch per gap, and each gap's median
// batch. Returns seconds per all-reduce, one per gap.
constexpr int kIdleRounds = 9;
std::vector<double> time_after_idle(ddp::ProcessGroup& backend, ddp::ProcessGroup& control,
                                    const at::Tensor& t, const std::vector<double>& gaps_s,
                                    double budget_s) {
  for (int i = 0; i < 3; ++i) backend.all_reduce(t);
  const double probe = time_batch(backend, control, t, 3, 0);
  std::vector<std::vector<double>> batches(gaps_s.size());
  for (int round = 0; round < kIdleRounds; ++round) {
    for (size_t g = 0; g < gaps_s.size(); ++g) {
      const double per_call = probe + gaps_s[g];
      const int calls =
          static_cast<int>(std::max(1.0, std::min(100000.0, budget_s / kIdleRounds / per_call)));
      batches[g].push_back(time_batch(backend, control, t, calls, gaps_s[g]));
    }
  }
  std::vector<double> seconds;
  for (const auto& b : batches) seconds.push_back(median(b));
  return seconds;
}

// Note [One core per rank]
// Unpinned, the scheduler may leave both ranks' threads on one core after a
// burst of Gloo calls (four threads hop per Gloo call): shm's 4 KiB
// all-reduce then took 22-31 us right after Gloo's rows and 6-9 us when
// timed first, and its small sizes came out in no order. Pinning rank r to
// the r-th CPU this process may use (when there are at least as many CPUs
// as ranks on the node) times every backend on the cores it would own on a
// dedicated node, whatever ran before. Returns the CPU, or -1 if not pinned.
int pin_to_own_core() {
  const char* local_rank = std::getenv("LOCAL_RANK");
  const char* local_size = std::getenv("LOCAL_WORLD_SIZE");
  if (local_rank == nullptr || local_size == nullptr) return -1;
  cpu_set_t allowed;
  if (sched_getaffinity(0, sizeof(allowed), &allowed) != 0) return -1;
  const int rank = std::atoi(local_rank);
  if (std::atoi(local_size) > CPU_COUNT(&allowed)) return -1;
  for (int cpu = 0, seen = 0; cpu < CPU_SETSIZE; ++cpu) {
    if (!CPU_ISSET(cpu, &allowed) || seen++ != rank) continue;
    cpu_set_t mine;
    CPU_ZERO(&mine);
    CPU_SET(cpu, &mine);
    return sched_setaffinity(0, sizeof(mine), &mine) == 0 ? cpu : -1;
  }
  return -1;
}

// A comma-separated list of backends, each once, each one ddp::init knows.
std::vector<std::string> parse_backends(const std::string& list) {
  std::vector<std::string> backends;
  std::stringstream in(list);
  for (std::string backend; std::getline(in, backend, ',');) {
    if (backend != "gloo" && backend != "shm" && backend != "auto") {
      throw ddp::ConfigError("unknown backend '" + backend + "' in --backends " + list +
                             ": use gloo, shm or auto (shm on one node, the hierarchical backend "
                             "across nodes), comma-separated");
    }
    if (std::find(backends.begin(), backends.end(), backend) != backends.end()) {
      throw ddp::ConfigError("backend '" + backend + "' is listed twice in --backends " + list);
    }
    backends.push_back(backend);
  }
  if (backends.empty()) throw ddp::ConfigError("--backends is empty: name gloo, shm or auto");
  return backends;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Times all-reduce through ddp's backends (run under ddprun).");
  int64_t min_bytes = 4 << 10;
  int64_t max_bytes = int64_t{256} << 20;
  double budget_s = 0.25;
  std::string backend_list = "gloo,shm";
  std::string dtype_name = "float32";
  app.add_option("--min-bytes", min_bytes, "smallest message");
  app.add_option("--max-bytes", max_bytes, "largest message");
  app.add_option("--seconds-per-size", budget_s, "rough time spent per size and backend");
  app.add_option("--backends", backend_list,
                 "backends to time, comma-separated (gloo, shm, auto); with two, the ratios "
                 "compare the second against the first");
  app.add_option("--dtype", dtype_name, "element type: float32, float16 or bfloat16 (sum)")
      ->check(CLI::IsMember({"float32", "float16", "bfloat16"}));
  std::vector<double> idle_us;
  app.add_option("--idle-us", idle_us,
                 "then time the smallest size after the caller spun this long before each call "
                 "(microseconds, several allowed; 0 is back to back)")
      ->check(CLI::Range(0.0, 1e6))
      ->delimiter(',');
  bool pin = true;
  app.add_flag("--pin,!--no-pin", pin,
               "pin each rank to a core of its own when the node has enough (Note [One core per "
               "rank]; default on)");
  CLI11_PARSE(app, argc, argv);
  const at::ScalarType dtype = dtype_name == "float16"    ? at::kHalf
                               : dtype_name == "bfloat16" ? at::kBFloat16
                                                          : at::kFloat;
  try {
    const std::vector<std::string> names = parse_backends(backend_list);
    // Before ddp::init, so that every thread the backends start inherits it.
    const int core = pin ? pin_to_own_core() : -1;
    // Gloo is always opened: it times its own rows and aligns the ranks.
    auto gloo = ddp::init(ddp::InitOptions().backend("gloo"));
    std::vector<std::shared_ptr<ddp::ProcessGroup>> backends;
    for (const auto& name : names) {
      if (name == "gloo") {
        backends.push_back(gloo);
        continue;
      }
      // Every further group meets at a port rank 0 holds (Note [A port held
      // from choice to use]) and broadcasts.
      std::optional<ddp::launch::PortReservation> reserved;
      if (gloo->rank() == 0) reserved.emplace();
      at::Tensor port = at::full({1}, reserved ? reserved->port() : 0, at::kInt);
      gloo->broadcast(port, 0);
      backends.push_back(ddp::init(ddp::InitOptions().backend(name).master_port(port.item<int>())));
    }
    const int n = gloo->size();
    const double bus_factor = n > 1 ? 2.0 * (n - 1) / n : 0.0;
    const bool ratios = backends.size() == 2;
    if (gloo->rank() == 0) {
      std::printf("ranks=%d dtype=%s %s\n%10s", n, dtype_name.c_str(),
                  core >= 0 ? "pinned=one-core-per-rank" : "pinned=no", "bytes");
      for (const auto& name : names) std::printf(" %14s", (name + " us").c_str());
      for (const auto& name : names) std::printf(" %14s", (name + " busbw GB/s").c_str());
      if (ratios) std::printf(" %9s %9s", "bw ratio", "lat ratio");
      std::printf("\n");
    }
    for (int64_t bytes = min_bytes; bytes <= max_bytes; bytes *= 4) {
      at::Tensor t = at::ones({bytes / static_cast<int64_t>(c10::elementSize(dtype))}, dtype);
      // Note [Each backend its own count]
      // Every backend is calibrated on its own, so each spends about budget_s per size. A count
      // taken from Gloo (2 ms at 4 KiB here) gave shm 125 calls of 16 us, batches of 0.4 ms, and
      // one descheduled vCPU made 16 KiB slower than 64 KiB. The probe's time is the slowest
      // rank's, so all ranks agree on the count.
      std::vector<double> seconds;
      for (const auto& backend : backends) {
        const double probe = time_all_reduce(*backend, *gloo, t, 2);
        const int iterations =
            static_cast<int>(std::max(double{kBatches}, std::min(100000.0, budget_s / probe)));
        seconds.push_back(time_all_reduce(*backend, *gloo, t, iterations));
      }
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
    // The smallest size after each idle gap: "idle backend=E bytes=B idle_us=G us=T", where T
    // is the all-reduce's share of the iteration (the spin subtracted).
    at::Tensor t = at::ones({min_bytes / static_cast<int64_t>(c10::elementSize(dtype))}, dtype);
    std::vector<double> gaps_s;
    for (double gap_us : idle_us) gaps_s.push_back(gap_us * 1e-6);
    for (size_t e = 0; e < backends.size() && !gaps_s.empty(); ++e) {
      // Each gap gets the time each size got above.
      const std::vector<double> seconds = time_after_idle(*backends[e], *gloo, t, gaps_s, budget_s);
      for (size_t g = 0; g < gaps_s.size() && gloo->rank() == 0; ++g) {
        std::printf("idle backend=%s bytes=%lld idle_us=%g us=%.1f\n", names[e].c_str(),
                    static_cast<long long>(min_bytes), idle_us[g], seconds[g] * 1e6);
      }
      std::fflush(stdout);
    }
    return 0;
  } catch (const ddp::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return static_cast<int>(ddp::exit_code_for(e));
  }
}

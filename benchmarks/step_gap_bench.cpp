// step_gap_bench: where the toy trainer's synchronized step spends the time
// that neither its compute nor a back-to-back all-reduce accounts for
// (docs/design/cost-model.md, "Limits and doubts"). Run under ddprun on 2
// ranks, e.g. on the simulated cluster by benchmarks/cluster/contention_probe.sh.
//
// Per iteration, one of:
//   all_reduce         an 84-byte Gloo all-reduce (the toy's gradients),
//                      back to back;
//   spin+all_reduce    spin SPIN_US (60) on the calling thread, then all-reduce;
//   sweep+all_reduce   add 1 to a 4 MiB float tensor, then all-reduce;
//   work+all_reduce    a fixed count of dependent multiply-adds in
//                      registers (about 100 us, no memory), then all-reduce:
//                      unlike spin, its length is work, not wall time, so it
//                      takes longer when it shares a core;
//   toy+all_reduce     one step of the toy (Linear(20, 1), batch 32, SGD)
//                      without DDP, then all-reduce;
//   ddp_step           the same step through DistributedDataParallel;
//   spin, sweep, work, toy, ddp_no_sync  the same without the all-reduce.
// The cases are interleaved, ROUNDS batches of CALLS iterations each, so a
// slow minute of this VM hits all of them; rank 0 prints, per case, the
// median batch's microseconds per iteration, and for the cases with an
// all-reduce, the all-reduce's share: that minus the same case without it.
// Last, the stragglers: CALLS no_sync steps timed one by one on every rank;
// the mean step, and the mean over steps of the slowest rank's (what a
// synchronized step would wait for, were the ranks independent).
#include <torch/torch.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "ddp/ddp.hpp"
#include "ddp/parallel/distributed_data_parallel.hpp"
#include "timing.hpp"

namespace {

using ddp_bench::Clock;
using ddp_bench::median;
using ddp_bench::spin;

// A chain of dependent multiply-adds, `count` long: CPU work that touches no memory.
double work(int64_t count) {
  volatile double seed = 1.0;
  double x = seed;
  for (int64_t i = 0; i < count; ++i) x = x * 0.999999 + 1e-7;
  return x;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app("Splits the toy trainer's synchronized step (run under ddprun, 2 ranks).");
  int rounds = 4;
  int calls = 600;
  app.add_option("--rounds", rounds, "batches per case")->check(CLI::Range(1, 100));
  app.add_option("--calls", calls, "iterations per batch")->check(CLI::Range(1, 100000));
  int spin_us = 60;
  app.add_option("--spin-us", spin_us, "microseconds spinning before spin+all_reduce")
      ->check(CLI::Range(0, 1000000));
  std::vector<std::string> only;
  app.add_option("--case", only, "run only these cases (repeatable; default: all)");
  CLI11_PARSE(app, argc, argv);
  try {
    at::set_num_threads(1);
    auto group = ddp::init(ddp::InitOptions().backend("gloo"));
    torch::manual_seed(0);
    const at::Tensor inputs = torch::rand({32, 20});
    const at::Tensor targets = torch::rand({32, 1});
    torch::nn::Linear plain(20, 1);
    torch::optim::SGD plain_sgd(plain->parameters(), torch::optim::SGDOptions(1e-3));
    ddp::DistributedDataParallel model(torch::nn::AnyModule(torch::nn::Linear(20, 1)),
                                       ddp::DistributedDataParallelOptions(), group);
    torch::optim::SGD ddp_sgd(model->parameters(), torch::optim::SGDOptions(1e-3));
    at::Tensor flat = torch::zeros({21});         // the toy's 84 bytes
    at::Tensor memory = torch::zeros({1 << 20});  // 4 MiB

    auto toy = [&] {
      plain_sgd.zero_grad();
      torch::mse_loss(plain(inputs), targets).backward();
      plain_sgd.step();
    };
    auto ddp_step = [&](bool sync) {
      ddp_sgd.zero_grad();
      std::optional<ddp::DistributedDataParallelImpl::NoSyncGuard> guard;
      if (!sync) guard.emplace(*model);
      torch::mse_loss(model->forward(inputs), targets).backward();
      guard.reset();
      ddp_sgd.step();
    };
    auto all_reduce = [&] { group->all_reduce(flat); };
    // The count of work() that takes 100 us on rank 0, the same on every rank.
    volatile double sink = 0;  // keeps the compiler from dropping work()'s loop
    const auto start = Clock::now();
    sink = work(1'000'000);
    const double ns_per_step =
        std::chrono::duration<double, std::nano>(Clock::now() - start).count() / 1e6;
    at::Tensor work_count =
        torch::full({1}, static_cast<int64_t>(100'000 / ns_per_step), at::kLong);
    group->broadcast(work_count, 0);
    const int64_t count = work_count.item<int64_t>();
    // name, what precedes the all-reduce (none: nothing), with the all-reduce
    const std::vector<std::pair<std::string, std::function<void()>>> cases = {
        {"all_reduce", all_reduce},
        {"spin+all_reduce", [&] { spin(std::chrono::microseconds(spin_us)), all_reduce(); }},
        {"spin", [&] { spin(std::chrono::microseconds(spin_us)); }},
        {"sweep+all_reduce", [&] { memory.add_(1.0), all_reduce(); }},
        {"sweep", [&] { memory.add_(1.0); }},
        {"work+all_reduce", [&] { sink = work(count), all_reduce(); }},
        {"work", [&] { sink = work(count); }},
        {"toy+all_reduce", [&] { toy(), all_reduce(); }},
        {"toy", toy},
        {"ddp_step", [&] { ddp_step(true); }},
        {"ddp_no_sync", [&] { ddp_step(false); }},
    };
    std::map<std::string, std::vector<double>> batches;
    for (int round = 0; round < rounds; ++round) {
      for (const auto& [name, iteration] : cases) {
        if (!only.empty() && std::find(only.begin(), only.end(), name) == only.end()) continue;
        group->barrier();
        const auto start = Clock::now();
        for (int i = 0; i < calls; ++i) iteration();
        const double us = std::chrono::duration<double>(Clock::now() - start).count() * 1e6;
        batches[name].push_back(us / calls);
      }
    }
    at::Tensor own = torch::zeros({calls}, at::kDouble);
    group->barrier();
    for (int i = 0; i < calls; ++i) {
      const auto start = Clock::now();
      ddp_step(false);
      own[i] = std::chrono::duration<double>(Clock::now() - start).count() * 1e6;
    }
    at::Tensor every = torch::zeros({group->size() * calls}, at::kDouble);
    group->all_gather(every, own);
    const at::Tensor per_rank = every.view({group->size(), calls});
    const double mean_us = per_rank.mean().item<double>();
    const double slowest_us = std::get<0>(per_rank.max(0)).mean().item<double>();
    if (group->rank() == 0) {
      const std::map<std::string, std::string> without = {
          {"all_reduce", ""},          {"spin+all_reduce", "spin"}, {"sweep+all_reduce", "sweep"},
          {"work+all_reduce", "work"}, {"toy+all_reduce", "toy"},   {"ddp_step", "ddp_no_sync"}};
      std::printf("ranks=%d rounds=%d calls=%d work=%lld (us per iteration, median batch)\n",
                  group->size(), rounds, calls, static_cast<long long>(count));
      for (const auto& [name, iteration] : cases) {
        if (batches[name].empty()) continue;
        const double us = median(batches[name]);
        std::printf("case=%s us=%.1f", name.c_str(), us);
        auto it = without.find(name);
        if (it != without.end()) {
          if (it->second.empty() || !batches[it->second].empty()) {
            const double base = it->second.empty() ? 0.0 : median(batches[it->second]);
            std::printf(" all_reduce_us=%.1f", us - base);
          }
        }
        std::printf("\n");
      }
      std::printf("stragglers no_sync_step_mean_us=%.1f slowest_rank_mean_us=%.1f\n", mean_us,
                  slowest_us);
    }
    group->barrier();
    return 0;
  } catch (const ddp::Error& e) {
    std::cerr << "error: " << e.what() << "\n";
    return static_cast<int>(ddp::exit_code_for(e));
  }
}

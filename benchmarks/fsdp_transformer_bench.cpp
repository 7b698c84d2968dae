// fsdp_transformer_bench: one rank of benchmarks/fsdp_transformer_bench.sh.
// Trains the decoder-only transformer of examples/common/gpt.hpp on random
// bytes with AdamW in fp32, one way per run: DistributedDataParallel, the
// bare model with ZeroRedundancyOptimizer stage 2, or
// FullyShardedDataParallel built under ddp::ShardedConstruction, its blocks
// the units, with or without activation checkpointing; sharded within each
// node and replicated across nodes (fsdp-hybrid, built under a
// ShardedConstruction of the node's group), or across the world and
// resharded to the node after forward (fsdp-hpz). Prints on rank 0 one
// line of key=value pairs, each the largest over the ranks: the RSS after
// ddp::init() (the process's fixed part), the pages of the libraries' code
// and data faulted in after it (the fixed part's growth, RssFile's), the
// peak RSS through construction
// and wrapping, the peak RSS through the steps, the bytes held in
// parameters, gradients and optimizer state, FSDP's peak of gathered
// bytes and of its host buffers in use (the gathered ones and the reduced
// shards; FullyShardedMemory::peak_buffer_bytes), the median step time and its forward, backward
// and optimizer parts, the model FLOPs of a step (three times a forward's, counted by
// ddp::training::FlopCounter, all ranks'), the MFU over rank 0's measured
// peak and the optimizer's share of one core's bandwidth,
// and, with --net-interface (a node's link on the simulated cluster), the
// bytes rank 0's node sent per timed step. --optimizer torch steps with
// LibTorch's AdamW instead of ddp::optim::AdamW (the same values, bit for
// bit; Note [One pass per parameter] in ddp/optim/adamw.hpp).
//
// glibc's mmap threshold is pinned at 128 KiB (as M_MMAP_THRESHOLD) so that
// freed tensors leave the RSS at once, and the peaks measure what was alive;
// that costs time (every activation and gradient above 128 KiB is mapped,
// faulted in and unmapped each step: 0.38 s -> 0.54 s for a width-1024
// step on one core), so --pin-mmap-threshold false leaves glibc's own
// threshold for the runs that measure speed (benchmarks/utilization_bench.sh).
// The pin is glibc's: under another allocator (ddprun preloads tcmalloc,
// Note [The host allocator] in ddp/base/allocator.hpp) it would do nothing
// and the peaks would include freed blocks kept for reuse, so the pin then
// refuses to run, naming the fix (ddprun --allocator glibc).

#include <malloc.h>
#include <torch/torch.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/gpt.hpp"
#include "ddp/ddp.hpp"
#include "memory.hpp"
#include "net_counter.hpp"
#include "timing.hpp"
#include "utilization.hpp"

namespace {

using ddp_bench::held_tensors;
using ddp_bench::largest_across_ranks;
using ddp_bench::reset_peak_rss;
using ddp_bench::status_bytes;
using ddp_bench::storage_bytes;
using ddp_bench::tx_bytes;

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "The transformer of examples/common/gpt.hpp: DDP, ZeRO-2 and FSDP memory and step "
      "time; run fsdp_transformer_bench.sh"};
  std::string way = "fsdp";
  int steps = 2;
  int64_t batch = 2, length = 64;
  ddp::examples::GptConfig config;
  config.context = 128;
  config.dropout = 0.0;
  std::string backend = "gloo", interface, optimizer_kind = "ddp";
  app.add_option("--way", way, "ddp, zero2, fsdp, fsdp-checkpoint, fsdp-hybrid or fsdp-hpz")
      ->required();
  app.add_option("--backend", backend, "gloo, shm or auto (the hierarchical one across nodes)");
  app.add_option("--net-interface", interface,
                 "count the bytes sent through this interface per timed step (rank 0's node)");
  app.add_option("--steps", steps, "timed steps, after one untimed");
  app.add_option("--optimizer", optimizer_kind, "AdamW: ddp (ddp::optim::AdamW) or torch");
  app.add_option("--width", config.width, "model width");
  app.add_option("--layers", config.layers, "blocks (each one FSDP unit)");
  app.add_option("--heads", config.heads, "attention heads");
  app.add_option("--batch", batch, "sequences per rank and step");
  app.add_option("--length", length, "tokens per sequence (at most the context, 128)");
  bool pin_mmap_threshold = true;
  app.add_option("--pin-mmap-threshold", pin_mmap_threshold,
                 "pin glibc's mmap threshold at 128 KiB, for exact RSS peaks (true), or leave "
                 "glibc's own, for speed (false)");
  CLI11_PARSE(app, argc, argv);
  const ddp::HostAllocator allocator = ddp::allocator_in_use();
  if (pin_mmap_threshold && allocator.kind != ddp::AllocatorKind::kGlibc) {
    std::fprintf(stderr,
                 "fsdp_transformer_bench: error: --pin-mmap-threshold true pins glibc's mmap "
                 "threshold, but this process allocates with %s; run it under `ddprun "
                 "--allocator glibc` for exact RSS peaks, or give --pin-mmap-threshold false\n",
                 allocator.summary().c_str());
    return static_cast<int>(ddp::ExitCode::kConfig);
  }
  if (pin_mmap_threshold) mallopt(M_MMAP_THRESHOLD, 128 * 1024);

  auto group = ddp::init(ddp::InitOptions().backend(backend));
  const int64_t fixed_rss = status_bytes("VmRSS");
  const int64_t code_rss_at_init = status_bytes("RssFile");
  config.checkpointed = way == "fsdp-checkpoint";
  const bool sharded =
      way == "fsdp" || way == "fsdp-checkpoint" || way == "fsdp-hpz" || way == "fsdp-hybrid";
  if (optimizer_kind != "ddp" && optimizer_kind != "torch") {
    std::fprintf(stderr, "fsdp_transformer_bench: --optimizer %s is not ddp or torch\n",
                 optimizer_kind.c_str());
    return 2;
  }
  if (!sharded && way != "ddp" && way != "zero2") {
    std::fprintf(stderr,
                 "fsdp_transformer_bench: --way %s is not one of ddp, zero2, fsdp, "
                 "fsdp-checkpoint, fsdp-hybrid, fsdp-hpz\n",
                 way.c_str());
    return 2;
  }

  reset_peak_rss();
  const auto built = std::chrono::steady_clock::now();
  std::shared_ptr<ddp::FullyShardedDataParallel> fsdp_model;
  std::shared_ptr<ddp::DistributedDataParallel> ddp_model;
  ddp::examples::Gpt net{nullptr};
  if (sharded) {
    auto options = ddp::FullyShardedDataParallelOptions();
    std::shared_ptr<ddp::ProcessGroup> shard_over = group;
    if (way == "fsdp-hpz") options.reshard_after_forward_mesh(ddp::DeviceMesh::by_node(group));
    if (way == "fsdp-hybrid") {
      options.device_mesh(ddp::DeviceMesh::by_node(group));
      shard_over = options.device_mesh()->shard_group();
    }
    ddp::ShardedConstruction construction(shard_over);
    torch::manual_seed(1);
    net = ddp::examples::Gpt(config);
    fsdp_model = std::make_shared<ddp::FullyShardedDataParallel>(net, options, group);
  } else {
    torch::manual_seed(1);
    net = ddp::examples::Gpt(config);
    if (way == "ddp") {
      ddp_model = std::make_shared<ddp::DistributedDataParallel>(
          net, ddp::DistributedDataParallelOptions().gradient_as_bucket_view(true), group);
    }
  }
  const double construction_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - built).count();
  const int64_t construction_rss = status_bytes("VmHWM");

  const auto adamw = torch::optim::AdamWOptions(1e-4);
  const bool fused = optimizer_kind == "ddp";
  auto make_adamw = [&](std::vector<at::Tensor> params) -> std::unique_ptr<torch::optim::AdamW> {
    if (fused) return std::make_unique<ddp::optim::AdamW>(std::move(params), adamw);
    return std::make_unique<torch::optim::AdamW>(std::move(params), adamw);
  };
  std::unique_ptr<torch::optim::AdamW> plain;
  std::unique_ptr<ddp::ZeroRedundancyOptimizer> zero;
  std::vector<at::Tensor> counted = net->parameters();
  if (fsdp_model) {
    plain = make_adamw((*fsdp_model)->parameters());
    for (const auto& shard : (*fsdp_model)->parameters()) counted.push_back(shard);
  } else if (ddp_model) {
    plain = make_adamw(net->parameters());
  } else {
    zero = std::make_unique<ddp::ZeroRedundancyOptimizer>(
        net->parameters(),
        fused ? ddp::zero_optimizer<ddp::optim::AdamW>(adamw)
              : ddp::zero_optimizer<torch::optim::AdamW>(adamw),
        ddp::ZeroRedundancyOptimizerOptions().stage(2), group);
  }
  torch::optim::Optimizer& optimizer = zero ? zero->local_optimizer() : *plain;

  const ddp::training::MachinePeak peak = ddp::training::measure_machine_peak(*group);
  double forward_flops = 0;
  // The peak measurement's matrices are not the step's: what the allocator
  // kept of them goes before the step's peak starts.
  ddp::release_free_memory();
  reset_peak_rss();
  std::vector<double> times, forward_times, backward_times, optimizer_times;
  int64_t held = 0, peak_gathered = 0, peak_buffers = 0, sent = 0;
  double loss_value = 0;
  for (int step = 0; step <= steps; ++step) {
    torch::manual_seed(100 * step + group->rank());
    const at::Tensor text = torch::randint(config.vocabulary, {batch, length + 1});
    const int64_t sent_before = tx_bytes(interface);
    const auto start = std::chrono::steady_clock::now();
    if (zero) {
      zero->zero_grad();
    } else {
      plain->zero_grad();
    }
    const at::Tensor input = text.narrow(1, 0, length);
    std::optional<ddp::training::FlopCounter> counter;
    if (step == 0) counter.emplace();  // the untimed first step's forward
    const at::Tensor logits = ddp_model    ? (*ddp_model)->forward(input)
                              : fsdp_model ? (*fsdp_model)->forward(input)
                                           : net->forward(input);
    if (counter) forward_flops = counter->flops();
    counter.reset();
    const at::Tensor loss = torch::cross_entropy_loss(logits.reshape({-1, config.vocabulary}),
                                                      text.narrow(1, 1, length).reshape({-1}));
    const auto forward_end = std::chrono::steady_clock::now();
    loss.backward();
    const auto backward_end = std::chrono::steady_clock::now();
    if (zero) {
      zero->step();
    } else {
      plain->step();
    }
    const double s =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (step > 0) {
      times.push_back(s);
      forward_times.push_back(std::chrono::duration<double>(forward_end - start).count());
      backward_times.push_back(std::chrono::duration<double>(backward_end - forward_end).count());
      optimizer_times.push_back(s - std::chrono::duration<double>(backward_end - start).count());
      sent += tx_bytes(interface) - sent_before;
    }
    loss_value = loss.item<double>();
    held = std::max(held, storage_bytes(held_tensors(counted, optimizer)));
    if (fsdp_model) {
      peak_gathered = std::max(peak_gathered, (*fsdp_model)->memory().peak_gathered_bytes);
      peak_buffers = std::max(peak_buffers, (*fsdp_model)->memory().peak_buffer_bytes);
    }
  }
  std::sort(times.begin(), times.end());
  // Rank 0's parts; model FLOPs: three forwards' (backward twice the
  // forward's), every rank's.
  const double model_flops = 3.0 * forward_flops * group->size();
  const int64_t step_rss = largest_across_ranks(status_bytes("VmHWM"), *group);
  const int64_t construction_peak = largest_across_ranks(construction_rss, *group);
  const int64_t fixed = largest_across_ranks(fixed_rss, *group);
  const int64_t code = largest_across_ranks(status_bytes("RssFile") - code_rss_at_init, *group);
  held = largest_across_ranks(held, *group);
  peak_gathered = largest_across_ranks(peak_gathered, *group);
  peak_buffers = largest_across_ranks(peak_buffers, *group);
  if (group->rank() == 0) {
    std::printf(
        "way=%s ranks=%d parameters=%lld fixed_rss_bytes=%lld code_rss_bytes=%lld "
        "construction_rss_bytes=%lld step_rss_bytes=%lld held_bytes=%lld "
        "peak_gathered_bytes=%lld peak_buffer_bytes=%lld construction_s=%.1f "
        "step_s=%.3f forward_s=%.3f backward_s=%.3f optimizer_s=%.3f %s %s "
        "optimizer=%s loss=%.4f tx_bytes_per_step=%lld\n",
        way.c_str(), group->size(), static_cast<long long>(config.parameter_count()),
        static_cast<long long>(fixed), static_cast<long long>(code),
        static_cast<long long>(construction_peak), static_cast<long long>(step_rss),
        static_cast<long long>(held), static_cast<long long>(peak_gathered),
        static_cast<long long>(peak_buffers), construction_s, times[times.size() / 2],
        ddp_bench::median(forward_times), ddp_bench::median(backward_times),
        ddp_bench::median(optimizer_times),
        ddp_bench::mfu_fields(model_flops, times[times.size() / 2], peak).c_str(),
        ddp_bench::adam_bandwidth_field(ddp_bench::optimizer_elements(optimizer),
                                        ddp_bench::median(optimizer_times), peak)
            .c_str(),
        optimizer_kind.c_str(), loss_value, static_cast<long long>(steps > 0 ? sent / steps : 0));
  }
  return 0;
}

// fsdp_bench: one rank of benchmarks/fsdp_bench.sh. Trains a deep MLP (a
// Sequential of Linear layers, about 51 M parameters by default) with AdamW
// in fp32 one way per run: DistributedDataParallel, DDP with
// ZeroRedundancyOptimizer stage 1, the bare model with stage 2, or
// FullyShardedDataParallel (prefetch on or off; sharded within each node and
// replicated across nodes, fsdp-hybrid; sharded across the world and
// resharded to the node after forward, fsdp-hpz; kept gathered from forward
// to backward, fsdp-keep-gathered: reshard_after_forward(false), PyTorch's
// SHARD_GRAD_OP). Prints on rank 0 one line
// of key=value pairs: the bytes each rank holds in parameters, gradients
// and optimizer state (distinct storages, counted after the step, when all
// three are alive; the largest over the ranks), FSDP's peak of full
// parameters and gradients, the peak RSS (the largest over the ranks), and
// the median step time. With --device cuda the model, the batches and so
// every state live on the GPU, and the line adds the CUDA caching
// allocator's peak of allocated bytes over the timed steps (the largest
// over the ranks; -1 where this build has no CUDA). With --net-interface
// (benchmarks/fsdp_cluster_bench.sh: a node's link) the line adds the bytes
// rank 0's node sent through it per timed step. The AdamW is
// ddp::optim::AdamW (one pass per parameter; LibTorch's step on CUDA), or
// LibTorch's with --optimizer torch: the same values, bit for bit. On the
// CPU the line adds the step's MFU (model FLOPs: three times a forward's,
// counted by ddp::training::FlopCounter, every rank's) over rank 0's
// measured peak, and the optimizer's share of one core's bandwidth.

#include <sys/resource.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <CLI/CLI.hpp>
#ifdef USE_C10D_NCCL
#include <c10/cuda/CUDACachingAllocator.h>
#endif

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "ddp/ddp.hpp"
#include "memory.hpp"
#include "net_counter.hpp"
#include "timing.hpp"
#include "utilization.hpp"

namespace {

using ddp_bench::held_tensors;
using ddp_bench::largest_across_ranks;
using ddp_bench::median;
using ddp_bench::storage_bytes;
using ddp_bench::tx_bytes;

namespace nn = torch::nn;

nn::Sequential make_model(int64_t width, int layers) {
  torch::manual_seed(1);
  nn::Sequential model;
  for (int k = 0; k < layers; ++k) {
    model->push_back(nn::Linear(width, width));
    if (k + 1 < layers) model->push_back(nn::Tanh());
  }
  return model;
}

int64_t peak_rss_bytes() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return static_cast<int64_t>(usage.ru_maxrss) * 1024;
}

torch::optim::AdamWOptions adamw_options() { return torch::optim::AdamWOptions(1e-4); }

// The CUDA caching allocator's peak of allocated bytes since the last reset
// (both pools); -1 without CUDA in this build.
void reset_cuda_peak([[maybe_unused]] const torch::Device& device) {
#ifdef USE_C10D_NCCL
  if (device.is_cuda()) c10::cuda::CUDACachingAllocator::resetPeakStats(device.index());
#endif
}
int64_t cuda_peak_bytes([[maybe_unused]] const torch::Device& device) {
#ifdef USE_C10D_NCCL
  if (device.is_cuda()) {
    return c10::cuda::CUDACachingAllocator::getDeviceStats(device.index()).allocated_bytes[0].peak;
  }
#endif
  return -1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"DDP, ZeRO-1, ZeRO-2 and FSDP memory and step time; run fsdp_bench.sh"};
  std::string way = "fsdp";
  int steps = 3, layers = 5;
  int64_t width = 3200, batch = 8;
  std::string backend = "gloo", device_name = "cpu", interface, optimizer_kind = "ddp";
  const std::vector<std::string> ways = {"ddp",
                                         "zero1",
                                         "zero2",
                                         "fsdp",
                                         "fsdp-no-prefetch",
                                         "fsdp-overlap",
                                         "fsdp-hybrid",
                                         "fsdp-hpz",
                                         "fsdp-keep-gathered"};
  app.add_option("--way", way, "how the model trains")->required()->check(CLI::IsMember(ways));
  app.add_option("--net-interface", interface,
                 "count the bytes sent through this interface per timed step (rank 0's node)");
  app.add_option("--steps", steps, "timed steps, after one untimed");
  app.add_option("--width", width, "width of each Linear layer");
  app.add_option("--layers", layers, "Linear layers (each one FSDP unit)");
  app.add_option("--batch", batch, "rows per rank and step");
  app.add_option("--backend", backend, "gloo, shm, nccl or auto");
  app.add_option("--device", device_name, "cpu or cuda (every rank on cuda:0)");
  app.add_option("--optimizer", optimizer_kind,
                 "AdamW: ddp (ddp::optim::AdamW, one pass per parameter) or torch");
  CLI11_PARSE(app, argc, argv);
  if (optimizer_kind != "ddp" && optimizer_kind != "torch") {
    std::fprintf(stderr, "fsdp_bench: --optimizer %s is not ddp or torch\n",
                 optimizer_kind.c_str());
    return 2;
  }
  const bool fused = optimizer_kind == "ddp";
  auto make_adamw =
      [&](std::vector<at::Tensor> params) -> std::unique_ptr<torch::optim::Optimizer> {
    if (fused) return std::make_unique<ddp::optim::AdamW>(std::move(params), adamw_options());
    return std::make_unique<torch::optim::AdamW>(std::move(params), adamw_options());
  };

  auto group = ddp::init(ddp::InitOptions().backend(backend));
  torch::manual_seed(2 + group->rank());
  auto net = make_model(width, layers);
  const torch::Device device(device_name == "cuda" ? torch::Device(torch::kCUDA, 0)
                                                   : torch::Device(device_name));
  net->to(device);
  auto sync = [&] {
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
  };
  int64_t parameters = 0;
  for (const auto& p : net->parameters()) parameters += p.numel();

  std::shared_ptr<ddp::DistributedDataParallel> ddp_model;
  std::shared_ptr<ddp::FullyShardedDataParallel> fsdp_model;
  std::unique_ptr<torch::optim::Optimizer> plain;
  std::unique_ptr<ddp::ZeroRedundancyOptimizer> zero;
  std::vector<at::Tensor> counted_parameters;
  if (way == "ddp" || way == "zero1") {
    ddp_model = std::make_shared<ddp::DistributedDataParallel>(
        net, ddp::DistributedDataParallelOptions().gradient_as_bucket_view(true), group);
  } else if (way.rfind("fsdp", 0) == 0) {
    auto options = ddp::FullyShardedDataParallelOptions()
                       .prefetch(way == "fsdp-no-prefetch" ? 0 : 1)
                       .overlap_reduction(way == "fsdp-overlap")
                       .reshard_after_forward(way != "fsdp-keep-gathered");
    if (way == "fsdp-hybrid") options.device_mesh(ddp::DeviceMesh::by_node(group));
    if (way == "fsdp-hpz") options.reshard_after_forward_mesh(ddp::DeviceMesh::by_node(group));
    fsdp_model = std::make_shared<ddp::FullyShardedDataParallel>(net, options, group);
  }
  if (way == "ddp") {
    plain = make_adamw(net->parameters());
  } else if (way == "zero1" || way == "zero2") {
    zero = std::make_unique<ddp::ZeroRedundancyOptimizer>(
        net->parameters(),
        fused ? ddp::zero_optimizer<ddp::optim::AdamW>(adamw_options())
              : ddp::zero_optimizer<torch::optim::AdamW>(adamw_options()),
        ddp::ZeroRedundancyOptimizerOptions().stage(way == "zero1" ? 1 : 2), group);
  } else {
    plain = make_adamw((*fsdp_model)->parameters());
  }
  torch::optim::Optimizer& optimizer = zero ? zero->local_optimizer() : *plain;
  counted_parameters = net->parameters();
  if (fsdp_model) {
    for (const auto& shard : (*fsdp_model)->parameters()) counted_parameters.push_back(shard);
  }

  const bool on_cpu = device.is_cpu();
  ddp::training::MachinePeak peak;
  if (on_cpu) peak = ddp::training::measure_machine_peak(*group);
  double forward_flops = 0;
  std::vector<double> times, forward_times, backward_times, step_times;
  const auto since = [](std::chrono::steady_clock::time_point from) {
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - from)
        .count();
  };
  int64_t held = 0, peak_gathered = 0, sent = 0;
  for (int step = 0; step <= steps; ++step) {
    const at::Tensor x = torch::randn({batch, width}, device),
                     y = torch::randn({batch, width}, device);
    if (fsdp_model) (*fsdp_model)->reset_peak_memory();
    sync();
    if (step == 1) reset_cuda_peak(device);  // the first step made the optimizer's state
    const int64_t sent_before = tx_bytes(interface);
    const auto start = std::chrono::steady_clock::now();
    if (zero) {
      zero->zero_grad();
    } else {
      plain->zero_grad();
    }
    std::optional<ddp::training::FlopCounter> counter;
    if (step == 0) counter.emplace();  // the untimed first step's forward
    const at::Tensor out = ddp_model    ? (*ddp_model)->forward(x)
                           : fsdp_model ? (*fsdp_model)->forward(x)
                                        : net->forward(x);
    if (counter) forward_flops = counter->flops();
    counter.reset();
    const at::Tensor loss = torch::mse_loss(out, y);
    sync();
    const double forward_ms = since(start);
    loss.backward();
    sync();
    const double backward_ms = since(start) - forward_ms;
    if (zero) {
      zero->step();
    } else {
      plain->step();
    }
    sync();
    const double ms = since(start);
    if (step > 0) {
      sent += tx_bytes(interface) - sent_before;
      times.push_back(ms);
      forward_times.push_back(forward_ms);
      backward_times.push_back(backward_ms);
      step_times.push_back(ms - forward_ms - backward_ms);
    }
    held = std::max(held, storage_bytes(held_tensors(counted_parameters, optimizer)));
    if (fsdp_model)
      peak_gathered = std::max(peak_gathered, (*fsdp_model)->memory().peak_gathered_bytes);
  }
  held = largest_across_ranks(held, *group);
  peak_gathered = largest_across_ranks(peak_gathered, *group);
  const int64_t rss = largest_across_ranks(peak_rss_bytes(), *group);
  const int64_t cuda_peak = largest_across_ranks(cuda_peak_bytes(device), *group);
  if (group->rank() == 0) {
    const std::string utilization =
        on_cpu && steps > 0
            ? ddp_bench::mfu_fields(3.0 * forward_flops * group->size(), median(times) / 1e3,
                                    peak) +
                  " " +
                  ddp_bench::adam_bandwidth_field(ddp_bench::optimizer_elements(optimizer),
                                                  median(step_times) / 1e3, peak)
            : std::string("mfu=n/a");
    std::printf(
        "way=%s ranks=%d backend=%s parameters=%lld held_bytes=%lld peak_gathered_bytes=%lld "
        "peak_rss_bytes=%lld cuda_peak_bytes=%lld device=%s step_ms=%.2f forward_ms=%.2f "
        "backward_ms=%.2f optimizer_ms=%.2f %s optimizer=%s tx_bytes_per_step=%lld\n",
        way.c_str(), group->size(), group->backend_name().c_str(),
        static_cast<long long>(parameters), static_cast<long long>(held),
        static_cast<long long>(peak_gathered), static_cast<long long>(rss),
        static_cast<long long>(cuda_peak), device.str().c_str(), median(times),
        median(forward_times), median(backward_times), median(step_times), utilization.c_str(),
        optimizer_kind.c_str(), static_cast<long long>(steps > 0 ? sent / steps : 0));
  }
  return 0;
}

// op_count_bench: ddp's side of benchmarks/op_count.sh. Counts the ATen
// operator calls of one training step of the bare model and of the same
// model under ddp::DistributedDataParallel at world size 1 (Gloo on CPU,
// NCCL on CUDA): their difference is what DDP adds per step. A count, not a
// time: any machine reproduces it exactly (for one LibTorch version and
// one ddp build). One line per configuration:
//
//   result side=ddp model=convnet device=cpu mode=ddp steps=3 ops_per_step=...
//       top_level_per_step=... other_thread_per_step=...
//       other_operator_calls_per_step=... non_operator_records_per_step=...
//       libtorch=...
//
// with --op-lines one line per operator name:
//
//   op side=ddp model=convnet device=cpu mode=ddp name=aten::add_ per_step=...
//       top_level_per_step=...
//
// then a table, and per DDP variant the operators whose per-step count
// differs from the bare step's (where DDP's added calls go).
//
//   build/bin/op_count_bench --devices cpu --options default,gradient_as_bucket_view
//
// The step (Note [Same step as the Python side]): zero_grad, forward,
// cross_entropy, backward, SGD (lr 0.01, momentum 0.9) step, on one random
// batch drawn once (the data do not change which operators run). Warm-up
// steps first: DDP rebuilds its buckets in the first iteration, and
// static_graph records the graph there.
//
// Note [What counts as an operator call]
// A RecordFunction callback of scope FUNCTION sees every call the
// dispatcher makes (aten::add_; c10d::allreduce_ where a collective goes
// through the dispatcher) and a few records that are no operator: the
// autograd engine's "autograd::engine::evaluate_function: ..." (one per
// autograd node run) and RECORD_FUNCTION scopes such as PyTorch's reducer's
// "torch.distributed.ddp.reducer::copy_bucket_to_grad". Counted: the calls
// of ATen operators, records with an operator name
// (RecordFunction::operator_name()) in the aten namespace. Counted apart and
// left out: the other operators (other_operator_calls_per_step), because the
// collectives are among them and only one side dispatches them: PyTorch's
// DDP calls c10d::allreduce_ and c10d::broadcast_ through the dispatcher,
// while ddp calls c10d's ProcessGroupGloo (or NCCL, or its own backends)
// directly, never through the dispatcher; and the records that are no
// operator (non_operator_records_per_step). Two figures:
//  - ops_per_step, the headline: every operator call, those made from inside
//    other operators included. Each call pays the dispatcher (and its
//    RecordFunction check, autograd and ADInplaceOrView layers), nested or
//    not, so this is the figure per-step overhead follows; and it does not
//    hide work behind composition: at::zeros counts 3 calls (zeros, and the
//    empty and zero_ it makes), as at::empty then zero_ count 2.
//  - top_level_per_step: calls that no other ATen call encloses on their
//    thread: the calls the training code itself (and the autograd engine,
//    for backward) makes, how many times code chose to call into ATen.
// The callback is global (at::addGlobalCallback): on CUDA the autograd
// backend runs backward on its device thread, which a thread-local callback
// registered here would reach only through the backend's propagation of
// thread-local state; a global one sees every thread, and the calls made on
// threads other than the calling one are reported (other_thread_per_step).
// The Python side (benchmarks/pytorch_op_count.py) counts the same records
// from torch.profiler's event tree.
//
// Note [World size 1 and the shortcut]
// At world size 1 ddp's default (single_process_shortcut) issues no
// collective, division or bucket copy: the average over one rank is the
// gradient itself. PyTorch's DDP has no such shortcut and runs its whole
// path. So the default variant says what ddp adds to a one-process job, and
// single_process_shortcut=false what it adds on every rank of a larger job
// (less the communication itself): the like-for-like comparison with
// PyTorch's DDP, whose count is the same at both. The Python side takes
// single_process_shortcut=false as its default and has no variant with the
// shortcut on.
//
// Note [Same step as the Python side]
// benchmarks/pytorch_op_count.py runs the same step with PyTorch: the same
// layers (benchmarks/pytorch_gpu_step_bench.py's models), the same batch
// sizes, warm-up and counted steps, DDP at world size 1 on an in-process
// store, and it counts the same calls (it leaves out what Python's
// record_function adds, instrumentation with no C++ counterpart). Its bare
// step then makes the same calls as this one except where LibTorch's C++
// frontend composes the step differently from Python's, per step with P
// parameters and B batch-norm layers (PyTorch 1.13, LibTorch 1.13):
//  - the SGD step is ddp::optim::SGD's (Note [Same operations as LibTorch's
//    step] in ddp/optim/sgd.hpp): on CPU its three foreach calls
//    (_foreach_mul_, _foreach_add_ twice) make each parameter's mul_, add_
//    and add_ inside them, where Python's SGD (per parameter on CPU) makes
//    those at the top level: +3 calls, 3P - 3 fewer top-level ones;
//  - Optimizer::zero_grad() detaches each gradient before zeroing it: +P
//    aten::detach_ (Python's sets requires_grad, no call);
//  - SGD's buf.mul_(momentum) takes the Scalar overload, which calls
//    aten::mul (out=) with the scalar wrapped: +P aten::mul nested (Python
//    passes a wrapped tensor to mul_ directly; the conversion under it is
//    the same on both sides);
//  - BatchNorm's num_batches_tracked += 1 is add_(Scalar), which calls
//    add_(Tensor): +B aten::add_ nested;
//  - torch::nn::Linear calls t and addmm itself, Python's F.linear calls
//    aten::linear: -1;
//  - backward's seed gradient: ones_like calls empty here and empty_strided
//    in Python (no change in the total).
// That is +2P + B + 2 calls here: +24 for the ConvNet (P = 10, B = 2), +146
// for ResNet-18 (P = 62, B = 20), as measured (with torch::optim::SGD,
// +2P + B - 1: +21 and +143). On PyTorch 2.x the lists differ (zero_grad
// sets gradients to None on both sides; on CUDA Python's SGD defaults to
// its foreach form, one call per list, as ddp::optim::SGD makes them), so
// the bare steps differ otherwise there. The comparison is of what DDP adds
// over each side's own bare step.

#include <ATen/record_function.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <torch/version.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <iomanip>
#include <iostream>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/models.hpp"
#include "common/resnet18.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/environment.hpp"
#include "ddp/comm/init.hpp"
#include "ddp/optim/sgd.hpp"
#include "ddp/parallel/distributed_data_parallel.hpp"

namespace {

struct Options {
  std::vector<std::string> models{"convnet", "resnet18"};
  std::vector<std::string> devices{"cpu"};
  std::vector<std::string> variants{"default", "single_process_shortcut=false",
                                    "gradient_as_bucket_view",
                                    "single_process_shortcut=false+gradient_as_bucket_view"};
  int warmup = 5;
  int steps = 3;
  int convnet_batch = 32;
  int resnet_batch = 8;
  uint64_t seed = 0;
  bool op_lines = false;
};

// The counts of one operator name.
struct NameCount {
  int64_t calls = 0;
  int64_t top_level = 0;
};

// What the callbacks collect while counting (Note [What counts as an operator
// call]). Global: the callbacks are plain function pointers.
struct Tally {
  std::mutex mutex;
  std::map<std::string, NameCount> by_name;
  int64_t other_thread = 0;
  int64_t other_operator = 0;
  int64_t non_operator = 0;
  std::thread::id main_thread;
};
Tally* g_tally = nullptr;
thread_local int t_depth = 0;  // operator calls open on this thread

// Whether a record is the call of an ATen operator (Note [What counts as an
// operator call]).
bool is_aten_call(const at::RecordFunction& fn) {
  return fn.operator_name().has_value() && std::strncmp(fn.name(), "aten::", 6) == 0;
}

std::unique_ptr<at::ObserverContext> on_start(const at::RecordFunction& fn) {
  Tally* tally = g_tally;
  if (tally == nullptr) return nullptr;
  if (!is_aten_call(fn)) {
    std::lock_guard<std::mutex> lock(tally->mutex);
    ++(fn.operator_name().has_value() ? tally->other_operator : tally->non_operator);
    return nullptr;
  }
  const bool top_level = t_depth++ == 0;
  std::lock_guard<std::mutex> lock(tally->mutex);
  NameCount& count = tally->by_name[fn.name()];
  ++count.calls;
  if (top_level) ++count.top_level;
  if (std::this_thread::get_id() != tally->main_thread) ++tally->other_thread;
  return nullptr;
}

void on_end(const at::RecordFunction& fn, at::ObserverContext* /*context*/) {
  // End callbacks run for the records whose start ran them, so the depth
  // stays balanced even when g_tally changes in between.
  if (is_aten_call(fn)) --t_depth;
}

// Counts the calls `body` makes, on every thread (the global callback of
// Note [What counts as an operator call]).
template <typename Body>
void count_calls(Tally& tally, const c10::Device& device, Body body) {
  if (device.is_cuda()) torch::cuda::synchronize();
  tally.main_thread = std::this_thread::get_id();
  g_tally = &tally;
  const at::CallbackHandle handle = at::addGlobalCallback(
      at::RecordFunctionCallback(on_start, on_end).scopes({at::RecordScope::FUNCTION}));
  try {
    body();
    if (device.is_cuda()) torch::cuda::synchronize();
  } catch (...) {
    at::removeCallback(handle);
    g_tally = nullptr;
    throw;
  }
  at::removeCallback(handle);
  g_tally = nullptr;
}

// A DDP variant as --options spells it: "default", or settings joined by
// '+', each NAME (a boolean set true) or NAME=VALUE, NAME a field of
// ddp::DistributedDataParallelOptions.
ddp::DistributedDataParallelOptions parse_variant(const std::string& variant) {
  ddp::DistributedDataParallelOptions options;
  if (variant == "default") return options;
  std::stringstream settings(variant);
  std::string setting;
  while (std::getline(settings, setting, '+')) {
    const auto equals = setting.find('=');
    const std::string name = setting.substr(0, equals);
    const std::string value = equals == std::string::npos ? "" : setting.substr(equals + 1);
    auto flag = [&]() {
      if (value.empty() || value == "true" || value == "1" || value == "on") return true;
      if (value == "false" || value == "0" || value == "off") return false;
      throw std::invalid_argument("--options: " + name + "=" + value +
                                  " is not a boolean; write true or false");
    };
    auto mib = [&]() {
      try {
        return std::stod(value);
      } catch (const std::exception&) {
        throw std::invalid_argument("--options: " + name + "=" + value +
                                    " is not a number of MiB, e.g. " + name + "=25");
      }
    };
    if (name == "bucket_cap_mb") {
      options.bucket_cap_mb(mib());
    } else if (name == "first_bucket_cap_mb") {
      options.first_bucket_cap_mb(mib());
    } else if (name == "broadcast_buffers") {
      options.broadcast_buffers(flag());
    } else if (name == "find_unused_parameters") {
      options.find_unused_parameters(flag());
    } else if (name == "gradient_as_bucket_view") {
      options.gradient_as_bucket_view(flag());
    } else if (name == "delay_allreduce") {
      options.delay_allreduce(flag());
    } else if (name == "static_graph") {
      options.static_graph(flag());
    } else if (name == "single_process_shortcut") {
      options.single_process_shortcut(flag());
    } else {
      throw std::invalid_argument(
          "--options: unknown setting '" + name +
          "'; the settings are DistributedDataParallelOptions fields: bucket_cap_mb, "
          "first_bucket_cap_mb, broadcast_buffers, find_unused_parameters, "
          "gradient_as_bucket_view, delay_allreduce, static_graph, single_process_shortcut");
    }
  }
  return options;
}

std::string mode_name(const std::string* variant) {
  if (variant == nullptr) return "bare";
  return *variant == "default" ? "ddp" : "ddp:" + *variant;
}

// A count per step: exact when the steps divide it.
std::string per_step(int64_t total, int steps) {
  if (total % steps == 0) return std::to_string(total / steps);
  std::ostringstream text;
  text << std::fixed << std::setprecision(2) << static_cast<double>(total) / steps;
  return text.str();
}

struct Counted {
  std::string model, device, mode;
  std::map<std::string, NameCount> by_name;
  int64_t calls = 0, top_level = 0, other_thread = 0, other_operator = 0, non_operator = 0;
};

Counted run_configuration(const Options& options, const std::string& model_name,
                          const c10::Device& device, const std::string* variant,
                          const std::shared_ptr<ddp::ProcessGroup>& group) {
  const bool resnet = model_name == "resnet18";
  torch::manual_seed(options.seed);
  torch::nn::AnyModule net = resnet ? torch::nn::AnyModule(ddp::examples::ResNet18())
                                    : torch::nn::AnyModule(ddp::examples::ConvNet());
  net.ptr()->to(device);
  std::unique_ptr<ddp::DistributedDataParallel> wrapped;
  if (variant != nullptr) {
    wrapped = std::make_unique<ddp::DistributedDataParallel>(net, parse_variant(*variant), group);
  }
  // PyTorch's SGD takes its foreach path on CUDA: ddp::optim::SGD is the
  // like-for-like C++ step there (on CPU Python's takes its per-parameter
  // path; Note [Same step as the Python side]).
  ddp::optim::SGD optimizer(net.ptr()->parameters(), torch::optim::SGDOptions(0.01).momentum(0.9));
  const int64_t batch = resnet ? options.resnet_batch : options.convnet_batch;
  const torch::Tensor x = torch::randn({batch, 1, 28, 28}).to(device);
  const torch::Tensor y = torch::randint(0, 10, {batch}, torch::kLong).to(device);
  auto step = [&] {
    optimizer.zero_grad();
    auto output = wrapped ? (*wrapped)->forward(x) : net.forward(x);
    auto loss = torch::cross_entropy_loss(output, y);
    loss.backward();
    optimizer.step();
  };
  for (int i = 0; i < options.warmup; ++i) step();

  Tally tally;
  count_calls(tally, device, [&] {
    for (int i = 0; i < options.steps; ++i) step();
  });
  Counted counted{model_name, device.is_cuda() ? "cuda" : "cpu", mode_name(variant), tally.by_name};
  for (const auto& [name, count] : tally.by_name) {
    counted.calls += count.calls;
    counted.top_level += count.top_level;
  }
  counted.other_thread = tally.other_thread;
  counted.other_operator = tally.other_operator;
  counted.non_operator = tally.non_operator;
  return counted;
}

void print_counted(const Options& options, const Counted& counted) {
  const std::string head =
      "side=ddp model=" + counted.model + " device=" + counted.device + " mode=" + counted.mode;
  const int steps = options.steps;
  std::cout << "result " << head << " steps=" << steps
            << " ops_per_step=" << per_step(counted.calls, steps)
            << " top_level_per_step=" << per_step(counted.top_level, steps)
            << " other_thread_per_step=" << per_step(counted.other_thread, steps)
            << " other_operator_calls_per_step=" << per_step(counted.other_operator, steps)
            << " non_operator_records_per_step=" << per_step(counted.non_operator, steps)
            << " libtorch=" << TORCH_VERSION << std::endl;
  if (!options.op_lines) return;
  for (const auto& [name, count] : counted.by_name) {
    std::cout << "op " << head << " name=" << name << " per_step=" << per_step(count.calls, steps)
              << " top_level_per_step=" << per_step(count.top_level, steps) << "\n";
  }
  std::cout << std::flush;
}

// The table, and per DDP variant the names whose count differs from the bare
// step's, largest difference first.
void print_summary(const Options& options, const std::vector<Counted>& all) {
  const int steps = options.steps;
  std::cout << "\n"
            << std::left << std::setw(10) << "model" << std::setw(7) << "device" << std::setw(58)
            << "mode" << std::right << std::setw(12) << "ops/step" << std::setw(12) << "added"
            << std::setw(12) << "top-level" << std::setw(12) << "added"
            << "\n";
  const Counted* bare = nullptr;
  for (const Counted& counted : all) {
    if (counted.mode == "bare") bare = &counted;
    std::cout << std::left << std::setw(10) << counted.model << std::setw(7) << counted.device
              << std::setw(58) << counted.mode << std::right << std::setw(12)
              << per_step(counted.calls, steps) << std::setw(12)
              << (bare ? per_step(counted.calls - bare->calls, steps) : "") << std::setw(12)
              << per_step(counted.top_level, steps) << std::setw(12)
              << (bare ? per_step(counted.top_level - bare->top_level, steps) : "") << "\n";
  }
  bare = nullptr;
  for (const Counted& counted : all) {
    if (counted.mode == "bare") {
      bare = &counted;
      continue;
    }
    if (bare == nullptr) continue;
    std::cout << "\nadded per step by " << counted.mode << " (" << counted.model << ", "
              << counted.device << "): calls (top-level)\n";
    std::set<std::string> names;
    for (const auto& item : counted.by_name) names.insert(item.first);
    for (const auto& item : bare->by_name) names.insert(item.first);
    std::vector<std::pair<int64_t, std::string>> differences;
    for (const auto& name : names) {
      auto count = [&](const Counted& c) {
        const auto it = c.by_name.find(name);
        return it == c.by_name.end() ? NameCount{} : it->second;
      };
      const NameCount with = count(counted), without = count(*bare);
      if (with.calls != without.calls || with.top_level != without.top_level) {
        differences.emplace_back(with.calls - without.calls, name);
      }
    }
    std::stable_sort(differences.begin(), differences.end(), [](const auto& a, const auto& b) {
      return std::abs(a.first) > std::abs(b.first);
    });
    if (differences.empty()) std::cout << "  (none)\n";
    for (const auto& [difference, name] : differences) {
      const auto with = counted.by_name.count(name) ? counted.by_name.at(name) : NameCount{};
      const auto without = bare->by_name.count(name) ? bare->by_name.at(name) : NameCount{};
      std::cout << "  " << std::left << std::setw(44) << name << std::right << std::setw(8)
                << per_step(difference, steps) << "  ("
                << per_step(with.top_level - without.top_level, steps) << ")\n";
    }
  }
  std::cout << std::flush;
}

int run(const Options& options) {
  std::vector<Counted> all;
  for (const auto& device_name : options.devices) {
    const bool cuda = device_name == "cuda";
    if (cuda && !torch::cuda::is_available()) {
      std::cerr << "error: --devices cuda, but no CUDA device is visible (or LibTorch was "
                   "built without CUDA); run with --devices cpu\n";
      return 2;
    }
    const c10::Device device = cuda ? c10::Device(c10::kCUDA, 0) : c10::Device(c10::kCPU);
    auto group = ddp::init(ddp::InitOptions().backend(cuda ? "nccl" : "gloo").rank(0).world_size(1),
                           ddp::EnvironmentMap{});
    for (const auto& model : options.models) {
      all.push_back(run_configuration(options, model, device, nullptr, group));
      print_counted(options, all.back());
      for (const auto& variant : options.variants) {
        all.push_back(run_configuration(options, model, device, &variant, group));
        print_counted(options, all.back());
      }
    }
  }
  print_summary(options, all);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Counts the ATen operator calls of a training step, bare and under ddp's "
      "DistributedDataParallel at world size 1."};
  Options options;
  app.add_option("--models", options.models, "convnet, resnet18")
      ->delimiter(',')
      ->check(CLI::IsMember({"convnet", "resnet18"}));
  app.add_option("--devices", options.devices, "cpu (Gloo), cuda (NCCL)")
      ->delimiter(',')
      ->check(CLI::IsMember({"cpu", "cuda"}));
  app.add_option("--options", options.variants,
                 "DDP variants: default, or DistributedDataParallelOptions settings joined "
                 "by '+', each NAME (true) or NAME=VALUE (gradient_as_bucket_view, "
                 "static_graph+gradient_as_bucket_view, broadcast_buffers=false, "
                 "bucket_cap_mb=1, ...)")
      ->delimiter(',');
  app.add_option("--warmup", options.warmup, "uncounted steps first (DDP rebuilds its buckets)")
      ->check(CLI::Range(0, 1000000));
  app.add_option("--steps", options.steps, "counted steps")->check(CLI::Range(1, 1000000));
  app.add_option("--convnet-batch", options.convnet_batch, "ConvNet batch size")
      ->check(CLI::Range(1, 60000));
  app.add_option("--resnet-batch", options.resnet_batch, "ResNet-18 batch size")
      ->check(CLI::Range(1, 60000));
  app.add_option("--seed", options.seed, "seed of the weights and of the batch");
  app.add_flag("--op-lines", options.op_lines, "print one line per operator name");
  CLI11_PARSE(app, argc, argv);
  try {
    for (const auto& variant : options.variants) parse_variant(variant);  // fail before running
    return run(options);
  } catch (const ddp::Error& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return static_cast<int>(ddp::exit_code_for(e));
  } catch (const std::exception& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return 1;
  }
}

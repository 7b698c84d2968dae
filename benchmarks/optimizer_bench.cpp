// The optimizers' step against this machine's memory bandwidth: LibTorch's
// Adam, AdamW and SGD with momentum beside ddp's (ddp::optim), on one core,
// over one large model's parameters and over the same elements cut into the
// many small and empty pieces of FSDP's shards; with the machine's limits
// (benchmarks/machine_limits.hpp) measured in the same run. Run
// benchmarks/optimizer_bench.sh.

#include <torch/torch.h>
#include <torch/version.h>
#include <CLI/CLI.hpp>

#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ddp/base/blas.hpp"
#include "ddp/optim/adam.hpp"
#include "ddp/optim/adamw.hpp"
#include "ddp/optim/sgd.hpp"
#include "machine_limits.hpp"
#include "timing.hpp"

namespace {

/// `total` elements as `pieces` parameters of uneven sizes, every tenth
/// empty (FSDP's pieces of a rank that holds none of some parameter).
std::vector<at::Tensor> parameters(int64_t total, int64_t pieces) {
  torch::manual_seed(0);
  std::vector<at::Tensor> params;
  if (pieces <= 1) {
    params.push_back(torch::randn({total}));
  } else {
    const at::Tensor weights = torch::rand({pieces}) + 0.5;
    const at::Tensor sizes = (weights / weights.sum() * total).to(torch::kLong);
    for (int64_t i = 0; i < pieces; ++i)
      params.push_back(torch::randn({i % 10 == 9 ? 0 : sizes[i].item<int64_t>()}));
  }
  for (auto& p : params) {
    p.requires_grad_(true);
    p.mutable_grad() = torch::randn_like(p);
  }
  return params;
}

#if TORCH_VERSION_MAJOR >= 2
/// LibTorch 2.x's own fused kernel (PyTorch's AdamW(fused=True) on CPU
/// since 2.4), called as PyTorch's optimizer calls it: one list per step,
/// the steps as float tensors. Its rounding is not LibTorch's AdamW's.
class AtenFusedAdamW : public torch::optim::AdamW {
 public:
  using torch::optim::AdamW::AdamW;
  torch::Tensor step(LossClosure) override {
    auto& o = static_cast<torch::optim::AdamWOptions&>(param_groups_[0].options());
    std::vector<at::Tensor> params, grads;
    for (auto& p : param_groups_[0].params()) {
      params.push_back(p);
      grads.push_back(p.grad());
    }
    if (moments_.empty()) {
      for (auto& p : params) {
        moments_.push_back(torch::zeros_like(p));
        squares_.push_back(torch::zeros_like(p));
        steps_.push_back(torch::zeros({}, torch::kFloat));
      }
    }
    for (auto& s : steps_) s.add_(1);
    at::_fused_adamw_(params, grads, moments_, squares_, {}, steps_, o.lr(), std::get<0>(o.betas()),
                      std::get<1>(o.betas()), o.weight_decay(), o.eps(), o.amsgrad(),
                      /*maximize=*/false);
    return {};
  }

 private:
  std::vector<at::Tensor> moments_, squares_, steps_;
};
#endif

struct Way {
  std::string name;
  double bytes_per_element;  // read and written once each by a one-pass step
  std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<at::Tensor>)> make;
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"optimizer_bench: optimizer steps against the memory bandwidth"};
  double millions = 50;
  int steps = 5;
  int64_t pieces = 2000;
  app.add_option("--params", millions, "parameters, in millions")->capture_default_str();
  app.add_option("--steps", steps, "timed steps per way (the median is reported)")
      ->capture_default_str();
  app.add_option("--pieces", pieces, "pieces of the sharded layout")->capture_default_str();
  bool limits_only = false;
  app.add_flag("--limits", limits_only,
               "print the machine's limits only, as key=value (the other scripts' MFU)");
  CLI11_PARSE(app, argc, argv);
  torch::set_num_threads(1);
  const int64_t total = static_cast<int64_t>(millions * 1e6);

  const ddp_bench::MachineLimits limits = ddp_bench::measure_machine_limits();
  if (limits_only) {
    std::printf("sgemm_gflops=%.2f memory_gbs=%.2f adam_pattern_gbs=%.2f blas=%s\n",
                limits.sgemm_gflops, limits.memory_gbs, limits.adam_pattern_gbs,
                ddp::blas_kind_name(ddp::blas_in_use().kind));
    return 0;
  }
  std::printf("%s\n", ddp::blas_in_use().summary().c_str());
  std::printf(
      "one core: sgemm %.1f GFLOP/s; memory: a += s b %.1f GB/s, Adam's pattern %.1f GB/s\n",
      limits.sgemm_gflops, limits.memory_gbs, limits.adam_pattern_gbs);

  using torch::optim::AdamOptions;
  using torch::optim::AdamWOptions;
  using torch::optim::SGDOptions;
  const AdamWOptions adamw = AdamWOptions(1e-3).weight_decay(0.1);
  const AdamOptions adam = AdamOptions(1e-3);
  const SGDOptions sgd = SGDOptions(1e-2).momentum(0.9);
  auto make = [](auto options, auto* type) {
    using Optimizer = std::remove_pointer_t<decltype(type)>;
    return [options](std::vector<at::Tensor> p) -> std::unique_ptr<torch::optim::Optimizer> {
      return std::make_unique<Optimizer>(std::move(p), options);
    };
  };
  const std::vector<Way> ways = {
    {"torch::optim::AdamW", 28, make(adamw, static_cast<torch::optim::AdamW*>(nullptr))},
    {"ddp::optim::AdamW", 28, make(adamw, static_cast<ddp::optim::AdamW*>(nullptr))},
#if TORCH_VERSION_MAJOR >= 2
    {"at::_fused_adamw_", 28, make(adamw, static_cast<AtenFusedAdamW*>(nullptr))},
#endif
    {"torch::optim::Adam", 28, make(adam, static_cast<torch::optim::Adam*>(nullptr))},
    {"ddp::optim::Adam", 28, make(adam, static_cast<ddp::optim::Adam*>(nullptr))},
    {"torch::optim::SGD momentum", 20, make(sgd, static_cast<torch::optim::SGD*>(nullptr))},
    {"ddp::optim::SGD momentum", 20, make(sgd, static_cast<ddp::optim::SGD*>(nullptr))},
  };
  std::printf("%-28s %-8s %10s %10s %9s %10s %12s\n", "optimizer", "layout", "step ms", "ns/param",
              "GB/s", "of memory", "of pattern");
  for (const int64_t layout : {int64_t{1}, pieces}) {
    for (const Way& way : ways) {
      std::vector<at::Tensor> params = parameters(total, layout);
      auto optimizer = way.make(params);
      optimizer->step();  // the state's allocation is not a step's cost
      std::vector<double> ms;
      for (int i = 0; i < steps; ++i)
        ms.push_back(1e3 * ddp_bench::best_seconds(1, [&] { optimizer->step(); }));
      const double step_ms = ddp_bench::median(ms);
      const double gbs = way.bytes_per_element * total / (step_ms / 1e3) / 1e9;
      std::printf("%-28s %-8s %10.1f %10.2f %9.1f %9.0f%% %11.0f%%\n", way.name.c_str(),
                  layout == 1 ? "whole" : (std::to_string(layout) + "p").c_str(), step_ms,
                  step_ms * 1e6 / total, gbs, 100 * gbs / limits.memory_gbs,
                  100 * gbs / limits.adam_pattern_gbs);
    }
  }
}

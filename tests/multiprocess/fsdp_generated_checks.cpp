#include "multiprocess/fsdp_generated_checks.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include "common/named_checks.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/nn/sync_batch_norm.hpp"
#include "ddp/parallel/fully_sharded_data_parallel.hpp"
#include "multiprocess/fsdp_generated_models.hpp"
#include "multiprocess/fsdp_models.hpp"

namespace ddp::testing {
namespace fsdp_generated {  // named: the unity build joins this file with others

constexpr int64_t kRows = 2;  // per rank and micro-batch
constexpr int kSteps = 3;
constexpr double kMaxNorm = 0.5;

// Every rank takes a branch in step 0 (so that the optimizer has state for
// it), none in step 1, rank 0 alone in step 2.
bool takes(int step, int rank) { return step == 0 || (step == 2 && rank == 0); }

Tensor inputs(const ModelSpec& spec, int step, int micro, int64_t rows) {
  torch::manual_seed(static_cast<uint64_t>(1000 * spec.seed + 10 * step + micro));
  if (spec.tokens) return torch::randint(kVocab, {rows, kLength}, torch::kLong);
  return torch::randn({rows, kLength, 4});
}

Tensor targets(const ModelSpec& spec, int step, int micro, int64_t rows) {
  torch::manual_seed(static_cast<uint64_t>(1000 * spec.seed + 10 * step + micro + 500));
  return torch::randn({rows, kLength, spec.tied ? kVocab : kOut});
}

std::unique_ptr<torch::optim::Optimizer> optimizer_for(const ModelSpec& spec,
                                                       const std::vector<Tensor>& params) {
  if (spec.adamw) {
    return std::make_unique<torch::optim::AdamW>(
        params, torch::optim::AdamWOptions(0.01).weight_decay(0.1).eps(1e-2));
  }
  return std::make_unique<torch::optim::SGD>(params, torch::optim::SGDOptions(0.05).momentum(0.9));
}

// A floating-point input in `dtype`; tokens as they are.
Tensor cast_input(const Tensor& x, std::optional<torch::ScalarType> dtype) {
  return dtype && x.is_floating_point() ? x.to(*dtype) : x;
}

// Multiplies each element by 1 + u, u uniform in [-size, size].
void jitter(const Tensor& tensor, double size) {
  tensor.mul_(1 + (torch::rand_like(tensor) * 2 - 1) * size);
}

// One process on every rank's rows, each branch applied to the rows of the
// ranks that take it. Note [A mixed-precision reference]: the forward and
// backward run in a copy of the model, in bf16 under param_dtype, refreshed
// from the fp32 masters before each step, its gradients accumulated in fp32
// on the masters after each micro-batch, and the masters stepped: what
// param_dtype promises (FSDP's MixedPrecisionPolicy with reduce_dtype
// fp32), in one process. Against the fp32 model instead, attention and
// BatchNorm models drift past any bound bf16 can be held to in 3 steps
// (seed 1057's attention weights by 0.14 at one rank as at three), which
// would hide a real error in the noise.
//
// With `noise` (a seed), the copy's parameters and the gradients each take
// four roundings of noise in the dtype the model runs in, every step: how
// far that moves the result bounds what the ranks' own rounding may (Note
// [Comparing a generated model]).
std::vector<std::pair<std::string, Tensor>> reference(const ModelSpec& spec, int world,
                                                      std::optional<uint64_t> noise = {}) {
  GeneratedNet net(spec);  // the masters
  // A tied tensor once (LibTorch's parameters() lists it under each name).
  const std::vector<Tensor> params = fsdp_models::distinct(net->parameters());
  auto optimizer = optimizer_for(spec, params);
  const std::optional<torch::ScalarType> low_dtype =
      spec.bf16 ? std::optional<torch::ScalarType>(torch::kBFloat16) : std::nullopt;
  GeneratedNet runs(spec);              // the model the forward runs in
  if (low_dtype) runs->to(*low_dtype);  // parameters and BatchNorm's statistics
  const std::vector<Tensor> run_params = fsdp_models::distinct(runs->parameters());
  // bf16 keeps 8 significant bits, fp32 24.
  const double rounding = 4 * (spec.bf16 ? 1.0 / 256 : 1.0 / (1 << 24));
  for (int step = 0; step < kSteps; ++step) {
    if (noise) torch::manual_seed(*noise * 100 + static_cast<uint64_t>(step));
    fsdp_models::clear_gradients(params);
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) {
        run_params[i].copy_(params[i]);
        if (noise) jitter(run_params[i], rounding);
      }
    }
    for (int micro = 0; micro < spec.micro_batches; ++micro) {
      std::vector<Tensor> masks(spec.blocks.size());
      for (size_t b = 0; b < spec.blocks.size(); ++b) {
        if (!spec.blocks[b].branch) continue;
        Tensor mask = torch::zeros({world * kRows, 1, 1});
        bool any = false;
        for (int r = 0; r < world; ++r) {
          if (takes(step, r)) mask.narrow(0, r * kRows, kRows).fill_(1);
          any = any || takes(step, r);
        }
        if (any) masks[b] = mask;
      }
      const Tensor out =
          runs->forward(cast_input(inputs(spec, step, micro, world * kRows), low_dtype), masks);
      torch::mse_loss(out.to(torch::kFloat), targets(spec, step, micro, world * kRows)).backward();
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) {
        if (!run_params[i].grad().defined()) continue;
        const Tensor grad = run_params[i].grad().to(params[i].scalar_type());
        params[i].mutable_grad() = params[i].grad().defined() ? params[i].grad() + grad : grad;
        run_params[i].mutable_grad() = Tensor();
      }
    }
    if (noise) {
      torch::NoGradGuard no_grad;
      for (const auto& p : params) {
        if (p.grad().defined()) jitter(p.grad(), rounding);
      }
    }
    if (spec.clip) {
      std::vector<Tensor> with_grad;
      for (const auto& p : params) {
        if (p.grad().defined()) with_grad.push_back(p);
      }
      torch::nn::utils::clip_grad_norm_(with_grad, kMaxNorm);
    }
    optimizer->step();
  }
  std::vector<std::pair<std::string, Tensor>> state;
  for (const auto& item : net->named_parameters()) state.emplace_back(item.key(), item.value());
  // BatchNorm's statistics as the model ran them (in fp32 when it does).
  for (const auto& item : runs->named_buffers()) state.emplace_back(item.key(), item.value());
  return state;
}

class GeneratedChecker {
 public:
  explicit GeneratedChecker(const std::shared_ptr<ProcessGroup>& group)
      : group_(group), rank_(group->rank()), world_(group->size()) {}

  void run(uint64_t seed) {
    const ModelSpec spec = make_spec(seed);
    const std::string name = fsdp_generated_check_name(seed);
    std::string problem;
    try {
      problem = train(spec);
    } catch (const std::exception& e) {
      problem = std::string("threw: ") + e.what();
    }
    checks_.check(name, problem.empty(), spec.describe() + ": " + problem.substr(0, 600));
  }

  int failed() const { return checks_.failed(); }

 private:
  // What differs from the reference, or "".
  std::string train(const ModelSpec& spec) {
    const auto expected = reference(spec, world_);
    GeneratedNet local(spec);
    bool norms = false;
    for (const auto& block : spec.blocks) norms = norms || block.layer == Layer::kBatchNorm;
    // SyncBatchNorm where there are ranks to synchronize: at one rank its
    // float64 sums against BatchNorm's own statistics, on 6 values a
    // channel, differ by up to 7e-4 after 3 steps (seeds 1378, 1935).
    if (norms && world_ > 1) ddp::nn::convert_sync_batchnorm(local.ptr(), group_);
    auto options = FullyShardedDataParallelOptions()
                       .wrap_policy(generated_policy(spec))
                       .prefetch(spec.prefetch)
                       .reshard_after_forward(spec.reshard_after_forward)
                       .find_unused_units(spec.find_unused_units);
    if (spec.bf16) options.param_dtype(torch::kBFloat16);

    std::optional<FullyShardedDataParallel> model;
    try {
      model.emplace(local, options, group_);
    } catch (const ConfigError& e) {
      const std::string message = e.what();
      for (const auto& words : spec.refusals) {
        if (message.find(words) != std::string::npos) return "";
      }
      return "refused: " + message;
    }
    if (!spec.refusals.empty()) return "not refused (expected: " + spec.refusals.front() + ")";
    auto optimizer = optimizer_for(spec, (*model)->parameters());
    for (int step = 0; step < kSteps; ++step) {
      fsdp_models::clear_gradients((*model)->parameters());
      for (int micro = 0; micro < spec.micro_batches; ++micro) {
        std::vector<Tensor> masks(spec.blocks.size());
        for (size_t b = 0; b < spec.blocks.size(); ++b) {
          if (spec.blocks[b].branch && takes(step, rank_)) masks[b] = torch::ones({kRows, 1, 1});
        }
        const Tensor x = inputs(spec, step, micro, world_ * kRows).narrow(0, rank_ * kRows, kRows);
        const Tensor y = targets(spec, step, micro, world_ * kRows).narrow(0, rank_ * kRows, kRows);
        auto run = [&] {
          const Tensor out = (*model)->forward(x, masks);
          torch::mse_loss(out.to(torch::kFloat), y).backward();
        };
        if (micro + 1 < spec.micro_batches) {
          auto guard = (*model)->no_sync();
          run();
        } else {
          run();
        }
      }
      if (spec.clip) (*model)->clip_grad_norm(kMaxNorm);
      optimizer->step();
    }
    const auto full = (*model)->full_parameters();
    const auto buffers = local->named_buffers();
    // Note [Comparing a generated model]: elementwise as numpy's allclose,
    // |got - expected| <= atol + rtol * |expected|, so that a bias that
    // starts at zero is compared absolutely. Some parameters have a
    // gradient that is zero in exact arithmetic (a bias before a norm, an
    // attention key's bias) and rounding noise in practice, where
    // SyncBatchNorm's sums and BatchNorm's differ; AdamW steps them by
    // lr * noise / eps, so AdamW runs with eps 1e-2 and an atol of 1e-4
    // (the noise seen: 1.5e-5), SGD with 1e-5.
    //
    // bf16 runs against the bf16 reference (Note [A mixed-precision
    // reference]): at one rank the same arithmetic, so the fp32 bound
    // (seeds 1000 to 1999 came within 6e-8). At more ranks each rank
    // rounds its own sums and gradients, which some models amplify as they
    // amplify any rounding: in bf16, BatchNorm over a few values and
    // attention by 0.17 in 3 steps (seed 1057); in fp32, LSTMs before
    // LayerNorm, or blocks called twice under no_sync, by up to 1.7e-4
    // (seeds 2798, 3791, whose float64 runs match one process to float64's
    // precision). So the bound at more ranks adds, per tensor, 4 times how
    // far the reference moves under rounding noise: two draws of noise
    // (reference(..., noise)), and for bf16 the fp32 reference; and for
    // bf16 an atol of 1e-2 and an rtol of 2^-6, BatchNorm's statistics
    // being kept in bf16's 8 bits. Over seeds 1000 to 4999 at 2 and 3
    // ranks no tensor came past 0.31 of its bound.
    const bool bf16_ranks = spec.bf16 && world_ > 1;
    const double rtol = bf16_ranks ? 1.0 / 64 : 1e-4;
    const double atol = bf16_ranks ? 1e-2 : spec.adamw ? 1e-4 : 1e-5;
    std::vector<std::vector<std::pair<std::string, Tensor>>> moved;  // the reference, perturbed
    if (world_ > 1) {
      for (uint64_t draw = 1; draw <= 2; ++draw) moved.push_back(reference(spec, world_, draw));
    }
    if (bf16_ranks) {
      ModelSpec fp32 = spec;
      fp32.bf16 = false;
      moved.push_back(reference(fp32, world_));
    }
    std::string differ;
    int count = 0;
    for (size_t i = 0; i < expected.size(); ++i) {
      const auto& [key, value] = expected[i];
      const Tensor* got = full.find(key);
      if (got == nullptr) got = buffers.find(key);
      if (got == nullptr) return "'" + key + "' is neither exported nor a buffer";
      if (got->sizes() != value.sizes()) return "'" + key + "' has another shape";
      const Tensor a = got->to(torch::kDouble), b = value.to(torch::kDouble);
      double spread = 0;
      for (const auto& other : moved) {
        const Tensor c = other[i].second.to(torch::kDouble);
        spread = std::max(spread, (c - b).abs().max().item<double>());
      }
      const double excess = ((a - b).abs() - rtol * b.abs()).max().item<double>();
      if (!(excess <= atol + 4 * spread) && count++ < 4) {
        differ += (differ.empty() ? "" : ", ") + key + " by " +
                  std::to_string((a - b).abs().max().item<double>());
        if (!moved.empty()) differ += " (rounding noise moves it " + std::to_string(spread) + ")";
      }
    }
    if (differ.empty()) return "";
    return std::to_string(count) + " tensor(s) differ from one process beyond " +
           std::to_string(atol) + " + " + std::to_string(rtol) + " |expected|: " + differ;
  }

  std::shared_ptr<ProcessGroup> group_;
  int rank_;
  int world_;
  NamedChecks checks_;
};

}  // namespace fsdp_generated

std::vector<uint64_t> parse_fsdp_generated_seeds(const std::string& text) {
  if (text == "suite") return fsdp_generated_suite_seeds();
  const size_t colon = text.find(':');
  if (colon == std::string::npos)
    throw std::invalid_argument("--seeds " + text + ": give FIRST:COUNT or suite");
  const uint64_t first = std::stoull(text.substr(0, colon));
  const uint64_t count = std::stoull(text.substr(colon + 1));
  std::vector<uint64_t> seeds;
  for (uint64_t s = first; s < first + count; ++s) seeds.push_back(s);
  return seeds;
}

int check_fsdp_generated(const std::shared_ptr<ProcessGroup>& group,
                         const std::vector<uint64_t>& seeds) {
  fsdp_generated::GeneratedChecker checker(group);
  for (uint64_t seed : seeds) checker.run(seed);
  return checker.failed();
}

}  // namespace ddp::testing

#include "multiprocess/fsdp_transformer_checks.hpp"

#include <torch/torch.h>

#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "common/gpt.hpp"
#include "common/named_checks.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/parallel/fully_sharded_data_parallel.hpp"
#include "ddp/parallel/sharded_construction.hpp"
#include "multiprocess/fsdp_models.hpp"

namespace ddp::testing {
namespace fsdp_transformer_checks {  // named: the unity build joins this file with others

using examples::Gpt;
using examples::GptConfig;
using torch::Tensor;

constexpr int kSteps = 3;
constexpr int64_t kRows = 2;  // sequences per rank
constexpr int64_t kLength = 12;
constexpr uint64_t kSeed = 11;

GptConfig small_config() {
  GptConfig config;
  config.vocabulary = 29;
  config.context = 16;
  config.width = 20;
  config.heads = 2;
  config.layers = 3;
  config.dropout = 0.0;  // one process cannot draw N ranks' masks
  return config;
}

// Rank `rank`'s batch at `step`: inputs and the next tokens.
std::pair<Tensor, Tensor> batch(int step, int rank) {
  torch::manual_seed(1000 * static_cast<uint64_t>(step) + static_cast<uint64_t>(rank));
  const Tensor text = torch::randint(small_config().vocabulary, {kRows, kLength + 1});
  return {text.narrow(1, 0, kLength), text.narrow(1, 1, kLength).reshape({-1})};
}

Tensor loss_of(const Tensor& logits, const Tensor& targets) {
  return torch::cross_entropy_loss(logits.to(torch::kFloat).reshape({-1, logits.size(-1)}),
                                   targets);
}

torch::optim::AdamWOptions adamw() { return torch::optim::AdamWOptions(1e-3); }

// One process: the masters in fp32; the forward and backward of each rank's
// batch in a copy in `low` (refreshed from the masters each step), its
// gradients added to the masters' in fp32, averaged over the ranks, as
// FSDP's param_dtype with fp32 reduction does (Note [A mixed-precision
// reference] in fsdp_generated_checks.cpp).
using Named = std::map<std::string, Tensor>;

Named reference(int world, std::optional<torch::ScalarType> low) {
  torch::manual_seed(kSeed);
  Gpt masters(small_config());
  const std::vector<Tensor> params = fsdp_models::distinct(masters->parameters());
  torch::optim::AdamW optimizer(params, adamw());
  torch::manual_seed(kSeed);
  Gpt runs(small_config());
  if (low) runs->to(*low);
  const std::vector<Tensor> run_params = fsdp_models::distinct(runs->parameters());
  for (int step = 0; step < kSteps; ++step) {
    fsdp_models::clear_gradients(params);
    {
      torch::NoGradGuard no_grad;
      for (size_t i = 0; i < params.size(); ++i) run_params[i].copy_(params[i]);
    }
    for (int rank = 0; rank < world; ++rank) {
      fsdp_models::clear_gradients(run_params);
      const auto [tokens, targets] = batch(step, rank);
      loss_of(runs->forward(tokens), targets).backward();
      for (size_t i = 0; i < params.size(); ++i) {
        const Tensor g = run_params[i].grad().to(torch::kFloat) / world;
        if (params[i].grad().defined()) {
          params[i].mutable_grad().add_(g);
        } else {
          params[i].mutable_grad() = g;
        }
      }
    }
    optimizer.step();
  }
  Named values;
  for (const auto& item : masters->named_parameters())
    values[item.key()] = item.value().detach().clone();
  return values;
}

Named sharded(const std::shared_ptr<ProcessGroup>& group, std::optional<torch::ScalarType> low) {
  GptConfig config = small_config();
  config.checkpointed = true;
  ShardedConstruction construction(group);
  torch::manual_seed(kSeed);
  FullyShardedDataParallel model(Gpt(config), FullyShardedDataParallelOptions().param_dtype(low),
                                 group);
  torch::optim::AdamW optimizer(model->parameters(), adamw());
  for (int step = 0; step < kSteps; ++step) {
    optimizer.zero_grad();
    const auto [tokens, targets] = batch(step, group->rank());
    loss_of(model->forward(tokens), targets).backward();
    optimizer.step();
  }
  Named values;
  for (const auto& item : model->full_parameters()) values[item.key()] = item.value();
  return values;
}

std::string compare(const Named& expected, const Named& actual, double atol, double rtol) {
  if (expected.size() != actual.size()) {
    return "parameters: " + std::to_string(actual.size()) + ", expected " +
           std::to_string(expected.size());
  }
  double worst = 0;
  std::string problem;
  for (const auto& [name, reference] : expected) {
    const auto found = actual.find(name);
    if (found == actual.end()) return "no parameter '" + name + "'";
    const Tensor difference = (found->second - reference).abs();
    const double over = (difference - atol - rtol * reference.abs()).max().item<double>();
    const double off = difference.max().item<double>();
    worst = std::max(worst, off);
    if (over > 0 && problem.empty()) problem = "'" + name + "' is " + std::to_string(off) + " off";
  }
  std::cout << "largest difference " << worst << std::endl;
  return problem;
}

}  // namespace fsdp_transformer_checks

int check_fsdp_transformer(const std::shared_ptr<ProcessGroup>& group) {
  using namespace fsdp_transformer_checks;
  NamedChecks checks;
  const int world = group->size();
  for (const bool bf16 : {false, true}) {
    const std::optional<torch::ScalarType> low =
        bf16 ? std::optional<torch::ScalarType>(torch::kBFloat16) : std::nullopt;
    std::string problem;
    try {
      const Named expected = reference(world, low);
      problem = compare(expected, sharded(group, low), bf16 ? 1e-2 : 1e-5, bf16 ? 1.0 / 64 : 0.0);
      // The steps moved every parameter: a comparison of models that did not train proves nothing.
      torch::manual_seed(kSeed);
      for (const auto& item : Gpt(small_config())->named_parameters()) {
        const double moved = (expected.at(item.key()) - item.value()).abs().max().item<double>();
        if (problem.empty() && moved < 1e-3) {
          problem = "'" + item.key() + "' moved only " + std::to_string(moved);
        }
      }
    } catch (const std::exception& e) {
      problem = std::string("threw: ") + e.what();
    }
    checks.check(bf16 ? fsdp_transformer_check::kBf16 : fsdp_transformer_check::kFp32,
                 problem.empty(), problem.substr(0, 600));
  }
  return checks.failed();
}

}  // namespace ddp::testing

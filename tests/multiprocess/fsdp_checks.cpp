#include "multiprocess/fsdp_checks.hpp"

#include <torch/torch.h>

#include <functional>
#include <vector>

#include "common/named_checks.hpp"
#include "ddp/comm/errors.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/parallel/fully_sharded_data_parallel.hpp"

namespace ddp::testing {
namespace {

namespace nn = torch::nn;
using torch::Tensor;

constexpr int64_t kSamplesPerRank = 3;
constexpr int kShardedSteps = 4;

// Sizes that do not divide by 2, 3 or 4: every unit's shard is padded.
nn::Sequential make_mlp(uint64_t seed, int64_t hidden = 13) {
  torch::manual_seed(seed);
  return nn::Sequential(nn::Linear(7, hidden), nn::ReLU(), nn::Linear(hidden, 9), nn::Tanh(),
                        nn::Linear(9, 5));
}

struct TwoLayerImpl : nn::Module {
  nn::Linear a{register_module("a", nn::Linear(7, 11))};
  nn::Linear b{register_module("b", nn::Linear(11, 5))};
  Tensor forward(Tensor x) { return b(torch::gelu(a(x))); }
};
TORCH_MODULE(TwoLayer);

using OptimizerFactory =
    std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<Tensor>)>;

OptimizerFactory sgd() {
  return [](std::vector<Tensor> p) {
    return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.1).momentum(0.9));
  };
}
OptimizerFactory adamw() {
  return [](std::vector<Tensor> p) {
    return std::make_unique<torch::optim::AdamW>(
        p, torch::optim::AdamWOptions(0.01).weight_decay(0.1));
  };
}

class FsdpChecker {
 public:
  explicit FsdpChecker(const std::shared_ptr<ProcessGroup>& group)
      : group_(group), rank_(group->rank()), world_(group->size()) {}

  int run() {
    const auto sgd_reference = reference(make_mlp(5), sgd());
    auto [sgd_params, sizes_ok, freed] = train(make_mlp(5 + rank_), sgd(), {});
    checks_.close_all(fsdp_check::kSgd, sgd_params, sgd_reference, 1e-5);
    checks_.check(fsdp_check::kShardSizes, sizes_ok.empty(), sizes_ok);
    checks_.check(fsdp_check::kFreed, freed.empty(), freed);

    const auto adamw_reference = reference(make_mlp(6), adamw());
    auto adamw_params = std::get<0>(train(make_mlp(6 + rank_), adamw(), {}));
    checks_.close_all(fsdp_check::kAdamW, adamw_params, adamw_reference, 1e-5);
    auto kept = std::get<0>(train(make_mlp(6 + rank_), adamw(),
                                  FullyShardedDataParallelOptions().reshard_after_forward(false)));
    checks_.check(fsdp_check::kKeepGathered, identical(kept, adamw_params), "they differ");
    auto unprefetched = std::get<0>(
        train(make_mlp(6 + rank_), adamw(), FullyShardedDataParallelOptions().prefetch(0)));
    checks_.check(fsdp_check::kNoPrefetch, identical(unprefetched, adamw_params), "they differ");

    torch::manual_seed(8);
    TwoLayer whole_reference;
    const auto whole_expected =
        reference_steps(*whole_reference, whole_reference->parameters(), sgd());
    torch::manual_seed(8 + rank_);
    checks_.close_all(fsdp_check::kWholeModel, std::get<0>(train(TwoLayer(), sgd(), {})),
                      whole_expected, 1e-5);
    frozen();
    mismatch();
    return checks_.failed();
  }

 private:
  Tensor rows(const Tensor& whole, int rank) const {
    return rank < 0 ? whole : whole.narrow(0, rank * kSamplesPerRank, kSamplesPerRank);
  }
  Tensor batch(int step, int stream, int64_t features) const {
    torch::manual_seed(100 * stream + step);
    return torch::randn({world_ * kSamplesPerRank, features});
  }

  // One process on the whole batch: the parameters after kShardedSteps.
  std::vector<Tensor> reference_steps(nn::Module& model, std::vector<Tensor> parameters,
                                      const OptimizerFactory& make_optimizer) {
    auto optimizer = make_optimizer(parameters);
    for (int step = 0; step < kShardedSteps; ++step) {
      optimizer->zero_grad();
      auto out = model.as<nn::Sequential>() ? model.as<nn::Sequential>()->forward(batch(step, 1, 7))
                                            : model.as<TwoLayer>()->forward(batch(step, 1, 7));
      torch::mse_loss(out, batch(step, 2, 5)).backward();
      optimizer->step();
    }
    std::vector<Tensor> result;
    for (const auto& p : model.parameters()) result.push_back(p.detach().clone());
    return result;
  }
  std::vector<Tensor> reference(nn::Sequential model, const OptimizerFactory& make_optimizer) {
    return reference_steps(*model, model->parameters(), make_optimizer);
  }

  // FSDP on this rank's rows; returns the full parameters after the steps,
  // "" or what was wrong with the shard sizes, "" or which parameter held
  // bytes between steps.
  std::tuple<std::vector<Tensor>, std::string, std::string> train(
      WrappedModule module, const OptimizerFactory& make_optimizer,
      FullyShardedDataParallelOptions options) {
    FullyShardedDataParallel model(module, options, group_);
    auto optimizer = make_optimizer(model->parameters());
    std::string sizes, freed;
    for (int step = 0; step < kShardedSteps; ++step) {
      optimizer->zero_grad();
      auto out = model->forward(rows(batch(step, 1, 7), rank_));
      torch::mse_loss(out, rows(batch(step, 2, 5), rank_)).backward();
      optimizer->step();
    }
    for (const auto& item : model->module()->named_parameters()) {
      if (item.value().storage().nbytes() != 0 && freed.empty()) {
        freed = "'" + item.key() + "' holds " + std::to_string(item.value().storage().nbytes()) +
                " bytes";
      }
    }
    const auto units = model->unit_names();
    const auto shards = model->parameters();
    size_t index = 0;
    for (const auto& unit : units) {
      int64_t numel = 0;
      for (const auto& item : model->module()->named_parameters()) {
        const std::string prefix = unit == "module" ? "" : unit + ".";
        if (item.key().rfind(prefix, 0) == 0) numel += item.value().numel();
      }
      const int64_t expected = (numel + world_ - 1) / world_;
      if (shards.at(index).numel() != expected && sizes.empty()) {
        sizes = "unit '" + unit + "' has a shard of " + std::to_string(shards[index].numel()) +
                " elements, expected " + std::to_string(expected);
      }
      ++index;
    }
    std::vector<Tensor> full;
    for (const auto& item : model->full_parameters()) full.push_back(item.value());
    return {full, sizes, freed};
  }

  static bool identical(const std::vector<Tensor>& a, const std::vector<Tensor>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!torch::equal(a[i], b[i])) return false;
    }
    return true;
  }

  void frozen() {
    auto freeze = [](nn::Sequential model) {
      for (auto& p : model[0]->parameters()) p.set_requires_grad(false);
      return model;
    };
    auto reference_model = freeze(make_mlp(9));
    const auto initial = reference_model[0]->parameters().front().detach().clone();
    std::vector<Tensor> trainable;
    for (const auto& p : reference_model->parameters()) {
      if (p.requires_grad()) trainable.push_back(p);
    }
    reference_steps(*reference_model, trainable, adamw());
    std::vector<Tensor> expected;
    for (const auto& p : reference_model->parameters()) expected.push_back(p.detach().clone());
    auto got = std::get<0>(train(freeze(make_mlp(9 + rank_)), adamw(), {}));
    if (!torch::equal(got.front(), initial)) {
      checks_.check(fsdp_check::kFrozen, false, "the frozen weight changed");
      return;
    }
    checks_.close_all(fsdp_check::kFrozen, got, expected, 1e-5);
  }

  void mismatch() {
    std::string message;
    try {
      FullyShardedDataParallel model(make_mlp(1, rank_ == world_ - 1 && world_ > 1 ? 14 : 13),
                                     group_);
      message = world_ == 1 ? "alone: nothing to differ" : "accepted";
    } catch (const InvalidArgumentError& e) {
      message = e.what();
    }
    const bool named = world_ == 1 || message.find(
                                          "the units differ across ranks at #2: rank 0 "
                                          "has '  0.weight float32 [13, 7]'") != std::string::npos;
    checks_.check(fsdp_check::kUnitMismatch, named, message);
  }

  std::shared_ptr<ProcessGroup> group_;
  int rank_;
  int world_;
  NamedChecks checks_;
};

}  // namespace

int check_fully_sharded(const std::shared_ptr<ProcessGroup>& group) {
  return FsdpChecker(group).run();
}

}  // namespace ddp::testing

#pragma once

// What the FSDP checks share (fsdp_checks.cpp, fsdp_hybrid_checks.cpp): the
// batches, one process's reference training and FSDP's on this rank's rows.

#include <torch/torch.h>

#include <functional>
#include <memory>
#include <string>
#include <tuple>
#include <vector>

#include "ddp/comm/process_group.hpp"
#include "ddp/optim/adamw.hpp"
#include "ddp/parallel/fully_sharded_data_parallel.hpp"
#include "multiprocess/fsdp_checks.hpp"
#include "multiprocess/fsdp_models.hpp"

namespace ddp::testing {

inline constexpr int64_t kSamplesPerRank = 3;
inline constexpr int kShardedSteps = 4;

using OptimizerFactory =
    std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<torch::Tensor>)>;

inline OptimizerFactory sgd() {
  return [](std::vector<torch::Tensor> p) {
    return std::make_unique<torch::optim::SGD>(p, torch::optim::SGDOptions(0.1).momentum(0.9));
  };
}
inline OptimizerFactory adamw() {
  return [](std::vector<torch::Tensor> p) {
    return std::make_unique<torch::optim::AdamW>(
        p, torch::optim::AdamWOptions(0.01).weight_decay(0.1));
  };
}
/// adamw()'s options, stepped in one pass per parameter (ddp/optim/adamw.hpp).
inline OptimizerFactory fused_adamw() {
  return [](std::vector<torch::Tensor> p) {
    return std::make_unique<ddp::optim::AdamW>(p,
                                               torch::optim::AdamWOptions(0.01).weight_decay(0.1));
  };
}

/// The world's ranks and this rank's place; the models and batches on
/// `device`.
class FsdpTrainer {
 protected:
  using Tensor = torch::Tensor;
  FsdpTrainer(const std::shared_ptr<ProcessGroup>& group, c10::Device device)
      : group_(group), rank_(group->rank()), world_(group->size()), device_(device) {}

  // `module` moved to device_.
  template <typename Module>
  Module on(Module module) const {
    module->to(device_);
    return module;
  }

  Tensor rows(const Tensor& whole, int rank) const {
    return rank < 0 ? whole : whole.narrow(0, rank * kSamplesPerRank, kSamplesPerRank);
  }
  Tensor batch(int step, int stream, int64_t features) const {
    torch::manual_seed(100 * stream + step);
    return torch::randn({world_ * kSamplesPerRank, features}).to(device_);
  }

  // One process on the whole batch: the parameters after kShardedSteps.
  std::vector<Tensor> reference_steps(torch::nn::Module& model, std::vector<Tensor> parameters,
                                      const OptimizerFactory& make_optimizer) {
    auto optimizer = make_optimizer(parameters);
    for (int step = 0; step < kShardedSteps; ++step) {
      optimizer->zero_grad();
      auto out = model.as<torch::nn::Sequential>()
                     ? model.as<torch::nn::Sequential>()->forward(batch(step, 1, 7))
                     : model.as<fsdp_models::TwoLayer>()->forward(batch(step, 1, 7));
      torch::mse_loss(out, batch(step, 2, 5)).backward();
      optimizer->step();
    }
    std::vector<Tensor> result;
    for (const auto& p : model.parameters()) result.push_back(p.detach().clone());
    return result;
  }
  std::vector<Tensor> reference(torch::nn::Sequential model,
                                const OptimizerFactory& make_optimizer) {
    on(model);
    return reference_steps(*model, model->parameters(), make_optimizer);
  }

  // FSDP on this rank's rows; returns the full parameters after the steps,
  // "" or what was wrong with the shard sizes, "" or which parameter held
  // bytes between steps.
  std::tuple<std::vector<Tensor>, std::string, std::string> train(
      WrappedModule module, const OptimizerFactory& make_optimizer,
      FullyShardedDataParallelOptions options, std::string* peak = nullptr,
      const std::function<void(FullyShardedDataParallel&)>& inspect = nullptr) {
    module.ptr()->to(device_);
    FullyShardedDataParallel model(module, options, group_);
    model->reset_peak_memory();
    auto optimizer = make_optimizer(model->parameters());
    std::string freed;
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
    std::vector<int64_t> shard_numels;  // each unit's, padded
    for (int64_t numel : model->unit_numels())
      shard_numels.push_back((numel + world_ - 1) / world_);
    if (peak) {
      // The two largest units' full parameters and the largest one's full
      // gradient (both largest ones' with overlap_reduction), padded.
      std::vector<int64_t> unit_bytes;
      for (int64_t shard : shard_numels) unit_bytes.push_back(shard * world_ * 4);
      std::sort(unit_bytes.rbegin(), unit_bytes.rend());
      const int64_t second = unit_bytes.size() > 1 ? unit_bytes[1] : 0;
      const int64_t bound =
          unit_bytes.at(0) + second + unit_bytes[0] + (options.overlap_reduction() ? second : 0);
      const auto memory = model->memory();
      if (memory.peak_gathered_bytes > bound || memory.peak_gathered_bytes == 0 ||
          memory.gathered_bytes != 0) {
        *peak = "peak " + std::to_string(memory.peak_gathered_bytes) + " bytes, bound " +
                std::to_string(bound) + ", held after the steps " +
                std::to_string(memory.gathered_bytes);
      }
    }
    if (inspect) inspect(model);
    const std::string sizes = wrong_shard_holdings(*model, model->shard_group(), device_);
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

  std::shared_ptr<ProcessGroup> group_;
  int rank_;
  int world_;
  c10::Device device_;
};

}  // namespace ddp::testing

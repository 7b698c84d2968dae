// FullyShardedDataParallel with a parameter unused inside a unit that ran
// (issue #54 item 4): with find_unused_units it keeps no gradient, as in
// one process, so AdamW leaves it as it was.

#include <torch/torch.h>

#include <string>
#include <vector>

#include "common/named_checks.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/parallel/fully_sharded_data_parallel.hpp"
#include "multiprocess/fsdp_models.hpp"
#include "multiprocess/fsdp_paths_checks.hpp"

namespace ddp::testing {
namespace fsdp_unused_parameter {  // named: the unity build joins this file with others

namespace nn = torch::nn;
using torch::Tensor;
namespace check = fsdp_paths_check;

constexpr int64_t kRows = 3;  // per rank
constexpr int kSteps = 3;

Tensor data(int step, int stream, int64_t rows) {
  torch::manual_seed(4000 * stream + step);
  return torch::randn({rows, 8});
}

// One unit (no wrap policy) with a branch that a step may not take.
struct BranchInsideImpl : nn::Module {
  nn::Linear trunk{register_module("trunk", nn::Linear(8, 8))};
  nn::Linear branch{register_module("branch", nn::Linear(8, 8))};
  nn::Linear head{register_module("head", nn::Linear(8, 8))};
  bool take = true;
  Tensor forward(const Tensor& x) {
    Tensor h = torch::tanh(trunk(x));
    if (take) h = h + branch(h);
    return head(h);
  }
};
TORCH_MODULE(BranchInside);

class UnusedParameterChecker {
 public:
  explicit UnusedParameterChecker(const std::shared_ptr<ProcessGroup>& group)
      : group_(group), rank_(group->rank()), world_(group->size()) {}

  int run() {
    unused_inside_unit();
    return checks_.failed();
  }

 private:
  Tensor input(int step) const { return data(step, 1, world_ * kRows); }
  Tensor target(int step) const { return data(step, 2, world_ * kRows); }
  Tensor rows(const Tensor& whole) const { return whole.narrow(0, rank_ * kRows, kRows); }
  // Every rank takes the branch in step 0, none in step 1, rank 0 alone
  // (so the batch's first rows) in step 2.
  bool takes(int step, int rank) const { return step == 0 || (step == 2 && rank == 0); }

  void unused_inside_unit() {
    torch::manual_seed(51);
    BranchInside reference_model;
    torch::optim::AdamW reference_optimizer(reference_model->parameters(),
                                            torch::optim::AdamWOptions(0.01).weight_decay(0.1));
    for (int step = 0; step < kSteps; ++step) {
      fsdp_models::clear_gradients(reference_model->parameters());
      Tensor loss = torch::zeros({});
      for (int r = 0; r < world_; ++r) {  // each rank's rows as that rank runs them
        reference_model->take = takes(step, r);
        const Tensor x = input(step).narrow(0, r * kRows, kRows);
        const Tensor y = target(step).narrow(0, r * kRows, kRows);
        loss = loss + torch::mse_loss(reference_model(x), y) / world_;
      }
      loss.backward();
      reference_optimizer.step();
    }
    torch::manual_seed(51);
    BranchInside local;
    FullyShardedDataParallel model(local, FullyShardedDataParallelOptions().find_unused_units(true),
                                   group_);
    torch::optim::AdamW optimizer(model->parameters(),
                                  torch::optim::AdamWOptions(0.01).weight_decay(0.1));
    Tensor branch_before, branch_after;
    std::string kept;
    for (int step = 0; step < kSteps; ++step) {
      fsdp_models::clear_gradients(model->parameters());
      local->take = takes(step, rank_);
      torch::mse_loss(model->forward(rows(input(step))), rows(target(step))).backward();
      if (step == 1) {
        for (const auto& item : model->named_parameters()) {
          if (item.key().rfind("branch.", 0) == 0 && item.value().grad().defined()) {
            kept = "'" + item.key() + "' has a gradient after a step no rank took it";
          }
        }
        branch_before = model->full_parameters()["branch.weight"];
      }
      optimizer.step();
      if (step == 1) branch_after = model->full_parameters()["branch.weight"];
    }
    if (kept.empty() && !torch::equal(branch_before, branch_after)) {
      kept = "AdamW moved 'branch.weight' in the step no rank took it, by " +
             std::to_string((branch_after - branch_before).abs().max().item<double>());
    }
    if (!kept.empty()) {
      checks_.check(check::kUnusedInsideUnit, false, kept);
      return;
    }
    std::vector<Tensor> full;
    for (const auto& item : model->full_parameters()) full.push_back(item.value());
    checks_.close_all(check::kUnusedInsideUnit, full, reference_model->parameters(), 1e-5);
  }

  std::shared_ptr<ProcessGroup> group_;
  int rank_;
  int world_;
  NamedChecks checks_;
};

}  // namespace fsdp_unused_parameter

int check_fsdp_unused_parameter_paths(const std::shared_ptr<ProcessGroup>& group) {
  return fsdp_unused_parameter::UnusedParameterChecker(group).run();
}

}  // namespace ddp::testing

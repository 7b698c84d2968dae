// FullyShardedDataParallel around one module registered under two names (a
// siamese encoder, issue #71 item 3): one unit whichever of its names the
// policy picks it by, or by its type or size, called twice per forward,
// matching one process with SGD and AdamW, and full_parameters() naming it
// under both names.

#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "common/named_checks.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/parallel/fully_sharded_data_parallel.hpp"
#include "multiprocess/fsdp_models.hpp"
#include "multiprocess/fsdp_paths_checks.hpp"
#include "multiprocess/fsdp_paths_models.hpp"

namespace ddp::testing {
namespace fsdp_shared_module {  // named: the unity build joins this file with others

namespace nn = torch::nn;
using fsdp_models::distinct;
using fsdp_paths::Siamese;
using torch::Tensor;
namespace check = fsdp_paths_check;

constexpr int64_t kRows = 3;  // per rank
constexpr int kSteps = 3;

Tensor data(int step, int stream, int64_t rows) {
  torch::manual_seed(5000 * stream + step);
  return torch::randn({rows, 8});
}

using MakeOptimizer =
    std::function<std::unique_ptr<torch::optim::Optimizer>(std::vector<Tensor> parameters)>;

std::unique_ptr<torch::optim::Optimizer> sgd(std::vector<Tensor> parameters) {
  return std::make_unique<torch::optim::SGD>(std::move(parameters),
                                             torch::optim::SGDOptions(0.1).momentum(0.9));
}

std::unique_ptr<torch::optim::Optimizer> adamw(std::vector<Tensor> parameters) {
  return std::make_unique<torch::optim::AdamW>(std::move(parameters),
                                               torch::optim::AdamWOptions(0.01).weight_decay(0.1));
}

bool named(const std::string& name, const std::vector<std::string>& names) {
  return std::find(names.begin(), names.end(), name) != names.end();
}

struct Case {
  std::string what;
  WrapPolicy policy;
  std::vector<std::string> units;  // the wrapper's unit_names()
};

class SharedModuleChecker {
 public:
  explicit SharedModuleChecker(const std::shared_ptr<ProcessGroup>& group)
      : group_(group), rank_(group->rank()), world_(group->size()) {}

  int run() {
    const std::vector<Case> cases = {
        {"wrap_by_type<Linear>", wrap_by_type<nn::LinearImpl>(), {"left", "head"}},
        {"by the name 'left'",
         [](const std::string& name, const nn::Module&) {
           return named(name, {"left", "head"});
         },
         {"left", "head"}},
        {"by the name 'right'",
         [](const std::string& name, const nn::Module&) {
           return named(name, {"right", "head"});
         },
         {"left", "head"}},
        {"by the name 'right' alone, the head the root's",
         [](const std::string& name, const nn::Module&) { return name == "right"; },
         {"(root)", "left"}},
        {"wrap_by_parameter_count(72)", wrap_by_parameter_count(72), {"left", "head"}},
    };
    std::string failures;
    for (const Case& c : cases) {
      failures += one(c, "SGD", sgd);
      failures += one(c, "AdamW", adamw);
    }
    checks_.check(check::kSiamese, failures.empty(), failures);
    return checks_.failed();
  }

 private:
  Tensor input(int step) const { return data(step, 1, world_ * kRows); }
  Tensor target(int step) const { return data(step, 2, world_ * kRows); }
  Tensor rows(const Tensor& whole) const { return whole.narrow(0, rank_ * kRows, kRows); }

  // One case against one process on the whole batch; "" when it matches,
  // else what differed.
  std::string one(const Case& c, const std::string& optimizer_name, const MakeOptimizer& make) {
    const std::string where = c.what + " with " + optimizer_name + ": ";
    torch::manual_seed(30);
    Siamese reference_model;
    auto reference_optimizer = make(distinct(reference_model->parameters()));
    for (int step = 0; step < kSteps; ++step) {
      reference_optimizer->zero_grad();
      torch::mse_loss(reference_model(input(step)), target(step)).backward();
      reference_optimizer->step();
    }
    torch::manual_seed(30 + rank_);  // the wrapper starts every rank from rank 0's
    try {
      FullyShardedDataParallel model(
          Siamese(), FullyShardedDataParallelOptions().wrap_policy(c.policy), group_);
      auto optimizer = make(model->parameters());
      for (int step = 0; step < kSteps; ++step) {
        optimizer->zero_grad();
        torch::mse_loss(model->forward(rows(input(step))), rows(target(step))).backward();
        optimizer->step();
      }
      if (model->unit_names() != c.units) {
        return where + "units " + c10::Join(", ", model->unit_names()) + "; ";
      }
      const auto full = model->full_parameters();
      std::string wrong;
      for (const auto& item : reference_model->named_parameters()) {
        if (!full.contains(item.key())) {
          wrong += " '" + item.key() + "' missing";
        } else if (!torch::allclose(full[item.key()], item.value(), 1e-5, 1e-5)) {
          wrong += " '" + item.key() + "' off by " +
                   std::to_string((full[item.key()] - item.value()).abs().max().item<double>());
        }
      }
      return wrong.empty() ? "" : where + wrong + "; ";
    } catch (const std::exception& e) {
      return where + "threw: " + e.what() + "; ";
    }
  }

  std::shared_ptr<ProcessGroup> group_;
  int rank_;
  int world_;
  NamedChecks checks_;
};

}  // namespace fsdp_shared_module

int check_fsdp_shared_module_paths(const std::shared_ptr<ProcessGroup>& group) {
  return fsdp_shared_module::SharedModuleChecker(group).run();
}

}  // namespace ddp::testing

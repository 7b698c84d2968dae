// FullyShardedDataParallel's module between steps (issue #54 item 6): its
// parameters read, printed or saved with torch::save are a ConfigError
// that says what to use, never a crash or an empty file, and training goes
// on as one process.

#include <torch/torch.h>

#include <functional>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "common/named_checks.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/parallel/fully_sharded_data_parallel.hpp"
#include "ddp/parallel/sharded_construction.hpp"
#include "multiprocess/fsdp_paths_checks.hpp"
#include "multiprocess/fsdp_paths_models.hpp"

namespace ddp::testing {
namespace fsdp_between_steps {  // named: the unity build joins this file with others

namespace nn = torch::nn;
using torch::Tensor;
namespace check = fsdp_paths_check;

constexpr int64_t kRows = 3;  // per rank
constexpr int kSteps = 3;

Tensor data(int step, int stream, int64_t rows) {
  torch::manual_seed(3000 * stream + step);
  return torch::randn({rows, 8});
}

// Layers whose kernels read raw storage, each a unit.
struct EmbedNormImpl : nn::Module {
  nn::Embedding embed{register_module("embed", nn::Embedding(11, 8))};
  nn::LayerNorm norm{register_module("norm", nn::LayerNorm(nn::LayerNormOptions({8})))};
  Tensor forward(const Tensor& tokens) {
    return sharded_call(norm, sharded_call(embed, tokens)).sum(1);
  }
};
TORCH_MODULE(EmbedNorm);

class BetweenStepsChecker {
 public:
  explicit BetweenStepsChecker(const std::shared_ptr<ProcessGroup>& group)
      : group_(group), rank_(group->rank()), world_(group->size()) {}

  int run() {
    module_between_steps();
    raw_storage_layers();
    kept_gradient();
    return checks_.failed();
  }

 private:
  Tensor input(int step) const { return data(step, 1, world_ * kRows); }
  Tensor target(int step) const { return data(step, 2, world_ * kRows); }
  Tensor rows(const Tensor& whole) const { return whole.narrow(0, rank_ * kRows, kRows); }

  static std::vector<Tensor> full(FullyShardedDataParallel& model) {
    std::vector<Tensor> result;
    for (const auto& item : model->full_parameters()) result.push_back(item.value());
    return result;
  }

  // What reading the module's parameter `name` with `read` threw: the
  // ConfigError's message, or what happened instead.
  static std::string attempt(const std::string& what, const std::function<void()>& read) {
    try {
      read();
    } catch (const ConfigError& e) {
      return e.what();
    } catch (const std::exception& e) {
      return what + ": not a ConfigError: " + e.what();
    }
    return what + ": no error";
  }

  void module_between_steps() {
    torch::manual_seed(31);
    fsdp_paths::Blocks reference_model(3);
    torch::optim::SGD reference_optimizer(reference_model->parameters(),
                                          torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int step = 0; step < kSteps; ++step) {
      reference_optimizer.zero_grad();
      torch::mse_loss(reference_model(input(step)), target(step)).backward();
      reference_optimizer.step();
    }
    torch::manual_seed(31 + rank_);
    fsdp_paths::Blocks local(3);
    FullyShardedDataParallel model(
        local, FullyShardedDataParallelOptions().wrap_policy(wrap_by_type<nn::LinearImpl>()),
        group_);
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    const Tensor weight = local->named_parameters()["blocks.1.weight"];
    std::vector<std::string> failures;
    for (int step = 0; step < kSteps; ++step) {
      optimizer.zero_grad();
      torch::mse_loss(model->forward(rows(input(step))), rows(target(step))).backward();
      optimizer.step();
      // Between steps, each way a user reads the module, every time.
      const std::vector<std::pair<std::string, std::function<void()>>> reads = {
          {"sum", [&] { (void)weight.sum(); }},
          {"clone", [&] { (void)weight.clone(); }},
          {"print",
           [&] {
             std::ostringstream out;
             out << weight;
           }},
          {"transpose and matmul",
           [&] {
             (void)torch::ones({2, 8}).matmul(weight.t());
           }},
          {"the block's forward",
           [&] {
             (void)local->blocks->ptr<nn::LinearImpl>(1)->forward(torch::ones({2, 8}));
           }},
          {"torch::save of the module",
           [&] {
             std::ostringstream out;
             torch::save(local, out);
           }},
      };
      for (const auto& [what, read] : reads) {
        const std::string error = attempt(what, read);
        if (error.find("full_parameters()") == std::string::npos ||
            error.find("save_consolidated()") == std::string::npos) {
          failures.push_back(what + ": " + error.substr(0, 300));
        }
      }
      // An operation given the parameter itself names it.
      const std::string named = attempt("t()", [&] { (void)weight.t().contiguous(); });
      if (named.find("'blocks.1.weight' of unit 'blocks.1'") == std::string::npos) {
        failures.push_back("t() does not name 'blocks.1.weight' of unit 'blocks.1': " +
                           named.substr(0, 300));
      }
    }
    if (!failures.empty()) {
      checks_.check(check::kBetweenSteps, false, failures.front());
      return;
    }
    checks_.close_all(check::kBetweenSteps, full(model), reference_model->parameters(), 1e-5);
  }

  // An Embedding and a LayerNorm unit run directly, within a forward (the
  // mistake) and between steps: a ConfigError naming the parameter.
  // Placeholders that came and went (Note [A placeholder names itself]):
  // modules built sharded under constructions that ended, then destroyed;
  // the memory of their storages is the next tensors'.
  void churn_placeholders(int modules) {
    for (int i = 0; i < modules; ++i) {
      ShardedConstruction construction(group_);
      (void)shard_as_built(nn::Linear(8, 8));
    }
  }

  void raw_storage_layers() {
    churn_placeholders(200);
    torch::manual_seed(32);
    EmbedNorm local;
    FullyShardedDataParallel model(local,
                                   FullyShardedDataParallelOptions().wrap_policy(
                                       [](const std::string& name, const nn::Module&) {
                                         return name == "embed" || name == "norm";
                                       }),
                                   group_);
    const Tensor tokens = torch::arange(6).remainder(11).view({2, 3});
    (void)model->forward(tokens).sum();
    std::vector<std::string> failures;
    // Exactly the parameters each operation read, in its arguments' order,
    // every time, with fresh tensors beside them.
    const std::vector<std::tuple<std::string, std::string, std::function<void()>>> reads = {
        {"the embedding's forward",
         "aten::embedding read parameter 'embed.weight' of unit 'embed' while",
         [&] { (void)local->embed->forward(tokens.clone()); }},
        {"the layer norm's forward",
         "aten::layer_norm read parameter 'norm.weight' of unit 'norm', 'norm.bias' of unit 'norm' "
         "while",
         [&] {
           (void)local->norm->forward(torch::ones({2, 8}));
         }},
    };
    for (int round = 0; round < 20 && failures.empty(); ++round) {
      for (const auto& [what, names, read] : reads) {
        churn_placeholders(1);  // freed just before the read's own tensors
        const std::string error = attempt(what, read);
        if (error.find(": " + names + " ") == std::string::npos ||
            error.find("sharded_call(block, x)") == std::string::npos) {
          failures.push_back(what + " in round " + std::to_string(round) + " does not say '" +
                             names + "': " + error.substr(0, 300));
        }
      }
    }
    checks_.check(check::kRawStorageLayers, failures.empty(),
                  failures.empty() ? "" : failures.front());
  }

  // Note [Long-lived buffers outside the heap]: a piece whose .grad is none
  // gets its gradient in the tensor it had last, unless the caller still
  // holds that one.
  void kept_gradient() {
    torch::manual_seed(33);
    fsdp_paths::Blocks reference_model(3);
    torch::optim::SGD reference_optimizer(reference_model->parameters(),
                                          torch::optim::SGDOptions(0.1).momentum(0.9));
    torch::manual_seed(33 + rank_);
    fsdp_paths::Blocks local(3);
    FullyShardedDataParallel model(
        local, FullyShardedDataParallelOptions().wrap_policy(wrap_by_type<nn::LinearImpl>()),
        group_);
    const std::vector<Tensor> pieces = model->parameters();
    torch::optim::SGD optimizer(pieces, torch::optim::SGDOptions(0.1).momentum(0.9));
    auto set_to_none = [](const std::vector<Tensor>& parameters) {
      for (auto p : parameters) p.mutable_grad() = Tensor();
    };
    std::vector<std::string> failures;
    Tensor kept, kept_values;
    const void* reused = nullptr;
    for (int step = 0; step < 4; ++step) {
      set_to_none(reference_model->parameters());
      torch::mse_loss(reference_model(input(step)), target(step)).backward();
      reference_optimizer.step();
      set_to_none(pieces);
      torch::mse_loss(model->forward(rows(input(step))), rows(target(step))).backward();
      optimizer.step();
      const Tensor& grad = pieces.front().grad();
      if (step == 0) {  // the caller keeps the first piece's gradient
        kept = grad;
        kept_values = grad.clone();
      } else if (step == 1) {
        if (!kept.equal(kept_values)) failures.push_back("the kept .grad changed in step 1");
        if (grad.data_ptr() == kept.data_ptr()) {
          failures.push_back("step 1's gradient was written into the kept .grad");
        }
        kept = Tensor();
        reused = grad.data_ptr();
      } else if (grad.data_ptr() != reused) {
        failures.push_back("step " + std::to_string(step) +
                           "'s gradient is not in step 1's buffer, which no one else held");
      }
    }
    if (!failures.empty()) {
      checks_.check(check::kKeptGradient, false, failures.front());
      return;
    }
    checks_.close_all(check::kKeptGradient, full(model), reference_model->parameters(), 1e-5);
  }

  std::shared_ptr<ProcessGroup> group_;
  int rank_;
  int world_;
  NamedChecks checks_;
};

}  // namespace fsdp_between_steps

int check_fsdp_between_steps_paths(const std::shared_ptr<ProcessGroup>& group) {
  return fsdp_between_steps::BetweenStepsChecker(group).run();
}

}  // namespace ddp::testing

#include "multiprocess/checkpoint_checks.hpp"

#include <torch/torch.h>

#include <string>
#include <vector>

#include "common/named_checks.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/nn/checkpoint.hpp"
#include "ddp/parallel/distributed_data_parallel.hpp"

namespace ddp::testing {
namespace checkpoint_checks {  // named: the unity build joins this file with others

namespace nn = torch::nn;
using torch::Tensor;

constexpr int64_t kRows = 4;  // per rank
constexpr int kSteps = 3;

// Residual MLP blocks with LayerNorm and dropout, each run through
// ddp::nn::checkpoint when `checkpointed`.
struct ResidualStackImpl : nn::Module {
  explicit ResidualStackImpl(bool checkpointed) : checkpointed(checkpointed) {
    for (int b = 0; b < 3; ++b) {
      blocks.push_back(
          register_module("block" + std::to_string(b),
                          nn::Sequential(nn::LayerNorm(nn::LayerNormOptions({16})),
                                         nn::Linear(16, 32), nn::Functional(torch::gelu, "none"),
                                         nn::Dropout(0.25), nn::Linear(32, 16))));
    }
    head = register_module("head", nn::Linear(16, 4));
  }
  Tensor forward(Tensor h) {
    for (auto& block : blocks)
      h = h + (checkpointed ? ddp::nn::checkpoint(block, h) : block->forward(h));
    return head(h);
  }
  bool checkpointed;
  std::vector<nn::Sequential> blocks;
  nn::Linear head{nullptr};
};
TORCH_MODULE(ResidualStack);

struct Trained {
  std::vector<Tensor> parameters;
  std::vector<double> losses;
};

class CheckpointChecker {
 public:
  explicit CheckpointChecker(const std::shared_ptr<ProcessGroup>& group)
      : group_(group), rank_(group->rank()) {}

  int run() {
    compare(checkpoint_check::kDdpBitForBit, /*micro_batches=*/1);
    compare(checkpoint_check::kDdpNoSync, /*micro_batches=*/2);
    return checks_.failed();
  }

 private:
  Trained train(bool checkpointed, int micro_batches) {
    torch::manual_seed(5);
    DistributedDataParallel model(ResidualStack(checkpointed), group_);
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    torch::manual_seed(100 + rank_);  // each rank's dropout stream
    Trained result;
    for (int step = 0; step < kSteps; ++step) {
      optimizer.zero_grad();
      for (int micro = 0; micro < micro_batches; ++micro) {
        torch::manual_seed(1000 * step + 10 * micro + rank_);
        const Tensor x = torch::randn({kRows, 16});
        const Tensor y = torch::randn({kRows, 4});
        auto backward = [&] {
          const Tensor loss = torch::mse_loss(model->forward(x), y);
          loss.backward();
          result.losses.push_back(loss.item<double>());
        };
        if (micro + 1 < micro_batches) {
          auto guard = model->no_sync();
          backward();
        } else {
          backward();
        }
      }
      optimizer.step();
    }
    for (const auto& p : model->parameters()) result.parameters.push_back(p.detach().clone());
    return result;
  }

  void compare(const std::string& name, int micro_batches) {
    std::string problem;
    try {
      const Trained plain = train(false, micro_batches);
      const Trained checkpointed = train(true, micro_batches);
      if (plain.losses != checkpointed.losses) problem = "the losses differ";
      if (plain.parameters.size() != checkpointed.parameters.size()) {
        problem = "another number of parameters";
      }
      for (size_t i = 0; problem.empty() && i < plain.parameters.size(); ++i) {
        if (!torch::equal(plain.parameters[i], checkpointed.parameters[i])) {
          problem =
              "parameter " + std::to_string(i) + " differs by " +
              std::to_string(
                  (plain.parameters[i] - checkpointed.parameters[i]).abs().max().item<double>());
        }
      }
    } catch (const std::exception& e) {
      problem = std::string("threw: ") + e.what();
    }
    checks_.check(name, problem.empty(), problem.substr(0, 400));
  }

  std::shared_ptr<ProcessGroup> group_;
  int rank_;
  NamedChecks checks_;
};

}  // namespace checkpoint_checks

int check_checkpoint(const std::shared_ptr<ProcessGroup>& group) {
  return checkpoint_checks::CheckpointChecker(group).run();
}

}  // namespace ddp::testing

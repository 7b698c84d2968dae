// ddp::nn::checkpoint around FullyShardedDataParallel units: each check
// trains the same FSDP model twice, its blocks called through
// ddp::sharded_call and through ddp::nn::checkpoint, and compares
// (checkpoint_checks.hpp).

#include <torch/torch.h>

#include <algorithm>

#include <functional>
#include <string>
#include <vector>

#include "common/named_checks.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/nn/checkpoint.hpp"
#include "ddp/parallel/fully_sharded_data_parallel.hpp"
#include "multiprocess/checkpoint_checks.hpp"

namespace ddp::testing {
namespace fsdp_checkpoint_checks {  // named: the unity build joins this file with others

namespace nn = torch::nn;
using torch::Tensor;

constexpr int64_t kRows = 4;  // per rank
constexpr int kSteps = 3;
constexpr int kBlocks = 3;

// An input layer and a head (the root unit) around residual blocks, each a
// Sequential unit; block 1 holds a BatchNorm1d.
struct StackImpl : nn::Module {
  StackImpl() {
    for (int b = 0; b < kBlocks; ++b) {
      nn::Sequential block(nn::LayerNorm(nn::LayerNormOptions({16})), nn::Linear(16, 32));
      if (b == 1) block->push_back(nn::BatchNorm1d(32));
      block->push_back(nn::Functional(torch::gelu, "none"));
      block->push_back(nn::Dropout(0.25));
      block->push_back(nn::Linear(32, 16));
      blocks.push_back(register_module("block" + std::to_string(b), block));
    }
  }
  Tensor forward(Tensor x) {
    Tensor h = input(x);
    for (int b = 0; b < kBlocks; ++b) {
      if (b == skip) continue;
      h = h + (checkpointed ? ddp::nn::checkpoint(blocks[b], h) : sharded_call(blocks[b], h));
    }
    return head(h);
  }
  nn::Linear input{register_module("input", nn::Linear(6, 16))};
  std::vector<nn::Sequential> blocks;
  nn::Linear head{register_module("head", nn::Linear(16, 4))};
  bool checkpointed = false;
  int skip = -1;  // a block this rank skips in this step
};
TORCH_MODULE(Stack);

struct Config {
  FullyShardedDataParallelOptions options;
  int micro_batches = 1;
  std::function<int(int step, int rank)> skipped = [](int, int) { return -1; };
  bool penalty = false;
};

struct Trained {
  std::vector<Tensor> parameters;
  std::vector<Tensor> buffers;
  std::vector<double> losses;
  int64_t peak_gathered_bytes = 0;
  int64_t largest_padding_bytes = 0;  // of a unit's full gradient
};

class FsdpCheckpointChecker {
 public:
  explicit FsdpCheckpointChecker(const std::shared_ptr<ProcessGroup>& group)
      : group_(group), rank_(group->rank()) {}

  int run() {
    using namespace fsdp_checkpoint_check;
    const auto units =
        FullyShardedDataParallelOptions().wrap_policy(wrap_by_type<nn::SequentialImpl>());
    compare(kBitForBit, Config{units}, 0.0, /*same_peak=*/true);
    Config lazy{FullyShardedDataParallelOptions(units).prefetch(0).reshard_after_forward(false)};
    lazy.micro_batches = 2;
    compare(kNoPrefetchNoSync, lazy, 0.0);
    Config skipping{FullyShardedDataParallelOptions(units).find_unused_units(true)};
    skipping.skipped = [](int step, int rank) { return (step + rank) % 2 == 0 ? 1 : -1; };
    compare(kSkippedUnit, skipping, 0.0);
    compare(kBf16, Config{FullyShardedDataParallelOptions(units).param_dtype(torch::kBFloat16)},
            0.0);
    Config penalty{units};
    penalty.penalty = true;
    compare(kGradientPenalty, penalty, 1e-6);
    whole_forward_refused(units);
    return checks_.failed();
  }

 private:
  Trained train(const Config& config, bool checkpointed) {
    torch::manual_seed(5);
    Stack stack;
    stack->checkpointed = checkpointed;
    FullyShardedDataParallel model(stack, config.options, group_);
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    torch::manual_seed(100 + rank_);  // each rank's dropout stream
    Trained result;
    for (int step = 0; step < kSteps; ++step) {
      stack->skip = config.skipped(step, rank_);
      optimizer.zero_grad();
      for (int micro = 0; micro < config.micro_batches; ++micro) {
        torch::manual_seed(1000 * step + 10 * micro + rank_);
        const Tensor x = torch::randn({kRows, 6}).requires_grad_(config.penalty);
        const Tensor y = torch::randn({kRows, 4});
        auto backward = [&] {
          Tensor loss = torch::mse_loss(model->forward(x).to(torch::kFloat), y);
          result.losses.push_back(loss.item<double>());
          if (config.penalty) {
            const Tensor g = torch::autograd::grad({loss}, {x}, {}, true, true)[0];
            loss = loss + 0.1 * g.pow(2).sum();
          }
          loss.backward();
        };
        if (micro + 1 < config.micro_batches) {
          auto guard = model->no_sync();
          backward();
        } else {
          backward();
        }
      }
      optimizer.step();
    }
    for (const auto& item : model->full_parameters()) result.parameters.push_back(item.value());
    for (const auto& b : stack->buffers()) result.buffers.push_back(b.clone());
    result.peak_gathered_bytes = model->memory().peak_gathered_bytes;
    const int64_t world = group_->size();
    for (int64_t numel : model->unit_numels()) {
      result.largest_padding_bytes = std::max<int64_t>(
          result.largest_padding_bytes, ((numel + world - 1) / world * world - numel) * 4);
    }
    return result;
  }

  static std::string differ(const std::vector<Tensor>& a, const std::vector<Tensor>& b,
                            const std::string& what, double tolerance) {
    if (a.size() != b.size()) return "another number of " + what;
    for (size_t i = 0; i < a.size(); ++i) {
      const bool same =
          tolerance == 0.0 ? torch::equal(a[i], b[i]) : torch::allclose(a[i], b[i], 0.0, tolerance);
      if (!same) {
        return what + " " + std::to_string(i) + " differs by " +
               std::to_string(
                   (a[i].to(torch::kDouble) - b[i].to(torch::kDouble)).abs().max().item<double>());
      }
    }
    return "";
  }

  void compare(const std::string& name, const Config& config, double tolerance,
               bool same_peak = false) {
    std::string problem;
    try {
      const Trained plain = train(config, false);
      const Trained checkpointed = train(config, true);
      problem = differ(plain.parameters, checkpointed.parameters, "parameter", tolerance);
      if (problem.empty()) {
        problem = differ(plain.buffers, checkpointed.buffers, "buffer", tolerance);
      }
      if (problem.empty() && tolerance == 0.0 && plain.losses != checkpointed.losses) {
        problem = "the losses differ";
      }
      if (problem.empty() && same_peak &&
          (checkpointed.peak_gathered_bytes > plain.peak_gathered_bytes ||
           checkpointed.peak_gathered_bytes <
               plain.peak_gathered_bytes - plain.largest_padding_bytes)) {
        problem = "peak gathered bytes " + std::to_string(checkpointed.peak_gathered_bytes) +
                  " with checkpointing, " + std::to_string(plain.peak_gathered_bytes) +
                  " without, a unit's padding at most " +
                  std::to_string(plain.largest_padding_bytes);
      }
    } catch (const std::exception& e) {
      problem = std::string("threw: ") + e.what();
    }
    checks_.check(name, problem.empty(), problem.substr(0, 400));
  }

  void whole_forward_refused(const FullyShardedDataParallelOptions& options) {
    std::string problem = "no ConfigError";
    try {
      torch::manual_seed(5);
      FullyShardedDataParallel model(Stack(), options, group_);
      const Tensor x = torch::randn({kRows, 6}).requires_grad_();
      try {
        ddp::nn::checkpoint(
            [&](const std::vector<Tensor>& in) {
              return std::vector<Tensor>{model->forward(in[0])};
            },
            {x});
      } catch (const ConfigError& e) {
        const std::string what = e.what();
        problem = what.find("checkpoint its units") == std::string::npos
                      ? "the message does not say what to do: " + what
                      : "";
      }
      // The wrapper still trains after the refusal.
      torch::mse_loss(model->forward(x), torch::zeros({kRows, 4})).backward();
    } catch (const std::exception& e) {
      problem = std::string("threw: ") + e.what();
    }
    checks_.check(fsdp_checkpoint_check::kWholeForwardRefused, problem.empty(), problem);
  }

  std::shared_ptr<ProcessGroup> group_;
  int rank_;
  NamedChecks checks_;
};

}  // namespace fsdp_checkpoint_checks

int check_fsdp_checkpoint(const std::shared_ptr<ProcessGroup>& group) {
  return fsdp_checkpoint_checks::FsdpCheckpointChecker(group).run();
}

}  // namespace ddp::testing

#include "multiprocess/static_graph_checks.hpp"

#include <torch/torch.h>

#include <string>
#include <vector>

#include "common/checkpoint.hpp"
#include "common/named_checks.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/parallel/distributed_data_parallel.hpp"

namespace ddp::testing {
namespace {

namespace nn = torch::nn;

constexpr int64_t kGraphPerRank = 4;  // samples per rank and step
constexpr int kGraphSteps = 4;

// input -> block applied `uses` times -> output, where each application of
// the block is a checkpointed segment and the last one includes the output
// layer: the first gradients of a backward pass then arrive inside a nested
// pass (Note [The end of backward]). `spare` is registered, never used.
struct SharedBlockNetImpl : nn::Module {
  SharedBlockNetImpl()
      : input(register_module("input", nn::Linear(8, 16))),
        block(register_module("block", nn::Linear(16, 16))),
        output(register_module("output", nn::Linear(16, 4))),
        spare(register_module("spare", nn::Linear(16, 16))) {}
  torch::Tensor forward(torch::Tensor x, int64_t uses, bool checkpointed) {
    torch::Tensor h = torch::tanh(input->forward(x));
    const auto segment = [this](const torch::Tensor& t) { return torch::tanh(block->forward(t)); };
    const auto last = [this, segment](const torch::Tensor& t) {
      return output->forward(segment(t));
    };
    for (int64_t k = 0; k + 1 < uses; ++k) h = checkpointed ? checkpoint(segment, h) : segment(h);
    return checkpointed ? checkpoint(last, h) : last(h);
  }
  nn::Linear input, block, output, spare;
};
TORCH_MODULE(SharedBlockNet);

// The step's whole batch, the same on every rank; rank r trains on chunk r.
std::pair<torch::Tensor, torch::Tensor> batch_of(int step, int64_t rows) {
  torch::manual_seed(7000 + step);
  return {torch::randn({rows, 8}), torch::randn({rows, 4})};
}

class StaticGraphChecker {
 public:
  explicit StaticGraphChecker(std::shared_ptr<ProcessGroup> group)
      : group_(std::move(group)), rank_(group_->rank()), world_(group_->size()) {}

  // kGraphSteps of SGD with momentum through DDP, each rank on its chunk, against
  // one process on the whole batch (without checkpointing: the same math).
  void matches_one_process(const std::string& variant, DistributedDataParallelOptions options) {
    using namespace static_graph_check;  // NOLINT(google-build-using-namespace)
    const std::string subject = block_applied_twice(variant);
    torch::manual_seed(11 + rank_);  // DDP must copy rank 0's weights
    SharedBlockNet net;
    DistributedDataParallel model(net, options.bucket_cap_mb(0.0005).first_bucket_cap_mb(0.0005),
                                  group_);
    const std::string error = train_ddp(model, 2, 0.9);
    SharedBlockNet reference = trained_reference(2, 0.9);
    checks_.close_all(check_name(subject, kParameters), net->parameters(), reference->parameters(),
                      1e-5, error);

    const ReducerStats stats = model->stats();
    const std::vector<int64_t> expected = {1, 1, 2, 2, 1, 1, 0, 0};
    checks_.check(check_name(subject, kGradientCounts), stats.static_gradient_counts == expected,
                  "recorded " + list_of(stats.static_gradient_counts) + ", expected " +
                      list_of(expected) + " (input, block, output, spare; weight and bias)");
    checks_.check(check_name(subject, kSpareKeepsNoGradient),
                  !net->spare->weight.grad().defined() && !net->spare->bias.grad().defined());
    checks_.check(check_name(subject, kNoUnusedSearch), stats.unused_parameter_searches == 0,
                  std::to_string(stats.unused_parameter_searches) + " searches");
    const int buckets = static_cast<int>(stats.bucket_bytes.size());
    checks_.check(check_name(subject, kOverlap),
                  buckets > 1 && stats.launched_during_backward == buckets,
                  std::to_string(stats.launched_during_backward) + " of " +
                      std::to_string(buckets) + " buckets");
  }

  // The same model without static_graph: the block's second gradient is an
  // error; applied once, reentrant checkpointing works and matches.
  void without_static_graph() {
    std::string error;
    {
      torch::manual_seed(11);
      DistributedDataParallel model(SharedBlockNet(), group_);
      auto [x, y] = batch_of(0, kGraphPerRank * world_);
      try {
        torch::mse_loss(model->forward(x.chunk(world_)[rank_], int64_t{2}, true),
                        y.chunk(world_)[rank_])
            .backward();
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    checks_.check(
        static_graph_check::kSecondGradientWithout,
        error.find("DistributedDataParallel: parameter 'block.") != std::string::npos &&
            error.find("received its gradient twice in one backward pass") != std::string::npos &&
            error.find("static_graph(true)") != std::string::npos,
        "message: '" + error + "'");

    torch::manual_seed(11);
    SharedBlockNet net;
    DistributedDataParallel model(
        net, DistributedDataParallelOptions().find_unused_parameters(true), group_);
    error = train_ddp(model, 1, 0);
    SharedBlockNet reference = trained_reference(1, 0);
    checks_.close_all(static_graph_check::kAppliedOnceWithout, net->parameters(),
                      reference->parameters(), 1e-5, error);
  }

  // Rank 1 applies the block twice in the first iteration, rank 0 once.
  void ranks_differ() {
    torch::manual_seed(11);
    DistributedDataParallel model(SharedBlockNet(),
                                  DistributedDataParallelOptions().static_graph(true), group_);
    auto [x, y] = batch_of(0, kGraphPerRank * world_);
    std::string error;
    try {
      torch::mse_loss(model->forward(x.chunk(world_)[rank_], int64_t{rank_ + 1}, true),
                      y.chunk(world_)[rank_])
          .backward();
    } catch (const InvalidArgumentError& e) {
      error = e.what();
    }
    checks_.check(
        static_graph_check::kRanksDiffer,
        error.find("the ranks' first iterations differ: 2 parameter(s) received different "
                   "numbers of gradients per backward pass: 'block.weight' (rank 0: 1, rank 1: "
                   "2); 'block.bias' (rank 0: 1, rank 1: 2)") != std::string::npos,
        "message: '" + error + "'");
  }

  // Every rank applies the block once in the third iteration.
  void later_iteration_differs() {
    torch::manual_seed(11);
    DistributedDataParallel model(SharedBlockNet(),
                                  DistributedDataParallelOptions().static_graph(true), group_);
    std::string error;
    try {
      for (int step = 0; step < 3; ++step) {
        auto [x, y] = batch_of(step, kGraphPerRank * world_);
        const int64_t uses = step == 2 ? 1 : 2;
        torch::mse_loss(model->forward(x.chunk(world_)[rank_], uses, true), y.chunk(world_)[rank_])
            .backward();
      }
    } catch (const InvalidArgumentError& e) {
      error = e.what();
    }
    checks_.check(
        static_graph_check::kLaterIterationDiffers,
        error.find("DistributedDataParallel(static_graph): rank " + std::to_string(rank_) +
                   ": 2 parameter(s) received fewer gradients in synchronized iteration 3 than "
                   "the first iteration recorded: 'block.weight' (1 of 2), 'block.bias' (1 of "
                   "2)") != std::string::npos,
        "message: '" + error + "'");
  }

  int failed() const { return checks_.failed(); }

 private:
  // kGraphSteps of SGD (lr 0.05) through `model`, each rank on its chunk, the
  // block applied `uses` times under checkpointing; what it threw, or "".
  std::string train_ddp(DistributedDataParallel& model, int64_t uses, double momentum) {
    torch::optim::SGD optimizer(model->parameters(),
                                torch::optim::SGDOptions(0.05).momentum(momentum));
    try {
      for (int step = 0; step < kGraphSteps; ++step) {
        auto [x, y] = batch_of(step, kGraphPerRank * world_);
        optimizer.zero_grad();
        torch::mse_loss(model->forward(x.chunk(world_)[rank_], uses, true), y.chunk(world_)[rank_])
            .backward();
        optimizer.step();
      }
    } catch (const std::exception& e) {
      return e.what();
    }
    return "";
  }

  // The same steps in one process on the whole batch, without checkpointing
  // (the same math), from rank 0's initial weights.
  SharedBlockNet trained_reference(int64_t uses, double momentum) const {
    torch::manual_seed(11);
    SharedBlockNet reference;
    torch::optim::SGD optimizer(reference->parameters(),
                                torch::optim::SGDOptions(0.05).momentum(momentum));
    for (int step = 0; step < kGraphSteps; ++step) {
      auto [x, y] = batch_of(step, kGraphPerRank * world_);
      optimizer.zero_grad();
      torch::mse_loss(reference->forward(x, uses, false), y).backward();
      optimizer.step();
    }
    return reference;
  }

  static std::string list_of(const std::vector<int64_t>& values) {
    std::string text = "{";
    for (size_t i = 0; i < values.size(); ++i) text += (i ? ", " : "") + std::to_string(values[i]);
    return text + "}";
  }

  std::shared_ptr<ProcessGroup> group_;
  int rank_;
  int world_;
  NamedChecks checks_;
};

}  // namespace

int check_static_graph(const std::shared_ptr<ProcessGroup>& group) {
  StaticGraphChecker checker(group);
  checker.matches_one_process(static_graph_check::kStaticGraph,
                              DistributedDataParallelOptions().static_graph(true));
  checker.matches_one_process(static_graph_check::kWithOtherOptions,
                              DistributedDataParallelOptions()
                                  .static_graph(true)
                                  .find_unused_parameters(true)
                                  .gradient_as_bucket_view(true));
  checker.without_static_graph();
  checker.ranks_differ();
  checker.later_iteration_differs();
  return checker.failed();
}

}  // namespace ddp::testing

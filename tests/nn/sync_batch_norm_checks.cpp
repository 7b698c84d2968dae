// SyncBatchNorm on each rank of a real process group against one process
// running BatchNorm on the concatenated batch of all ranks.

#include "nn/sync_batch_norm_checks.hpp"

#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <limits>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "common/models.hpp"
#include "common/named_checks.hpp"
#include "ddp/distributed_data_parallel.hpp"
#include "ddp/errors.hpp"
#include "ddp/nn/sync_batch_norm.hpp"

namespace ddp::testing {
namespace {

namespace nn = torch::nn;
using ddp::nn::convert_sync_batchnorm;
using ddp::nn::SyncBatchNorm;
using ddp::nn::SyncBatchNormImpl;
constexpr float kTolerance = 1e-5f;

float relativeError(const torch::Tensor& got, const torch::Tensor& expected) {
  if (got.sizes() != expected.sizes()) return 1e30f;
  if (got.numel() == 0) return 0;
  const float scale = expected.abs().max().item<float>();
  return (got.to(torch::kFloat) - expected.to(torch::kFloat)).abs().max().item<float>() /
         std::max(scale, 1e-12f);
}

// The larger of a and b, or NaN when either is (std::max(0, NaN) is 0, and
// a NaN result would pass).
float maxKeepingNaN(float a, float b) {
  return std::isnan(a) || std::isnan(b) ? std::numeric_limits<float>::quiet_NaN() : std::max(a, b);
}

// One configuration: the shape after (N, C), every rank's batch size, the
// BatchNorm options.
struct Case {
  std::string name;
  std::vector<int64_t> spatial;
  std::vector<int64_t> batch_per_rank;  // indexed by rank
  nn::BatchNormOptions options;
};

class Checker {
 public:
  explicit Checker(std::shared_ptr<ProcessGroup> group)
      : group_(std::move(group)), rank_(group_->rank()), world_(group_->size()) {}

  int failed() const { return checks_.failed(); }

  void close(const std::string& what, const torch::Tensor& got, const torch::Tensor& expected) {
    const float error = relativeError(got, expected);
    record(what, error <= kTolerance,
           "max relative error " + std::to_string(error) + " > " + std::to_string(kTolerance));
  }

  void record(const std::string& what, bool ok, const std::string& detail) {
    checks_.check(what, ok, detail);
  }

  // This rank's rows of a tensor holding every rank's rows in rank order.
  torch::Tensor mine(const torch::Tensor& whole, const std::vector<int64_t>& sizes) const {
    const int64_t offset = std::accumulate(sizes.begin(), sizes.begin() + rank_, int64_t{0});
    return whole.narrow(0, offset, sizes[rank_]);
  }

  // The sum over ranks of this rank's tensor (a weight gradient's share).
  torch::Tensor sumOverRanks(const torch::Tensor& t) const {
    torch::Tensor total = t.detach().clone().contiguous();
    group_->all_reduce(total, ReduceOp::kSum);
    return total;
  }

  static nn::AnyModule referenceLayer(size_t spatial_dims, const nn::BatchNormOptions& options) {
    if (spatial_dims <= 1) return nn::AnyModule(nn::BatchNorm1d(options));
    if (spatial_dims == 2) return nn::AnyModule(nn::BatchNorm2d(options));
    return nn::AnyModule(nn::BatchNorm3d(options));
  }

  // Three training steps, then eval, comparing everything on the way.
  void layer(const Case& c) {
    const int64_t channels = c.options.num_features();
    nn::AnyModule reference = referenceLayer(c.spatial.size(), c.options);
    SyncBatchNorm sync(c.options, group_);
    auto ref_params = reference.ptr()->named_parameters();
    auto ref_buffers = reference.ptr()->named_buffers();
    if (c.options.affine()) {  // non-trivial affine values, the same everywhere
      torch::manual_seed(5);
      torch::NoGradGuard no_grad;
      ref_params["weight"].copy_(torch::rand({channels}) + 0.5);
      ref_params["bias"].copy_(torch::randn({channels}));
      sync->weight.copy_(ref_params["weight"]);
      sync->bias.copy_(ref_params["bias"]);
    }
    const int64_t total =
        std::accumulate(c.batch_per_rank.begin(), c.batch_per_rank.end(), int64_t{0});
    std::vector<int64_t> shape{total, channels};
    shape.insert(shape.end(), c.spatial.begin(), c.spatial.end());
    for (int step = 0; step < 3; ++step) {
      torch::manual_seed(100 + step);
      torch::Tensor x_all = (torch::randn(shape) * 2 + 0.7).requires_grad_();
      torch::Tensor upstream = torch::randn(shape);
      torch::Tensor y_all = reference.forward(x_all);
      (y_all * upstream).sum().backward();

      torch::Tensor x = mine(x_all, c.batch_per_rank).detach().clone().requires_grad_();
      torch::Tensor y = sync->forward(x);
      (y * mine(upstream, c.batch_per_rank)).sum().backward();

      const std::string at = c.name + " step " + std::to_string(step) + ": ";
      close(at + "output", y, mine(y_all, c.batch_per_rank));
      close(at + "input gradient", x.grad(), mine(x_all.grad(), c.batch_per_rank));
      if (c.options.affine()) {
        close(at + "weight gradient summed over ranks", sumOverRanks(sync->weight.grad()),
              ref_params["weight"].grad());
        close(at + "bias gradient summed over ranks", sumOverRanks(sync->bias.grad()),
              ref_params["bias"].grad());
        sync->weight.mutable_grad().zero_();
        sync->bias.mutable_grad().zero_();
        ref_params["weight"].mutable_grad().zero_();
        ref_params["bias"].mutable_grad().zero_();
      }
    }
    if (c.options.track_running_stats()) {
      close(c.name + ": running mean", sync->running_mean, ref_buffers["running_mean"]);
      close(c.name + ": running variance", sync->running_var, ref_buffers["running_var"]);
      record(c.name + ": num_batches_tracked",
             sync->num_batches_tracked.item<int64_t>() == 3 &&
                 ref_buffers["num_batches_tracked"].item<int64_t>() == 3,
             "got " + std::to_string(sync->num_batches_tracked.item<int64_t>()) + " (reference " +
                 std::to_string(ref_buffers["num_batches_tracked"].item<int64_t>()) +
                 "), expected 3");
    }
    // Eval: running statistics (or local batch statistics), no collective.
    // Ranks run different numbers of eval passes: a collective inside would
    // pair up wrongly with the next check's and fail or time out.
    reference.ptr()->eval();
    sync->eval();
    torch::manual_seed(999);
    torch::Tensor x_all = torch::randn(shape) * 3 - 1;
    torch::Tensor expected;
    if (c.options.track_running_stats()) {
      expected = mine(reference.forward(x_all), c.batch_per_rank);
    } else {  // each rank normalizes with its own batch
      nn::AnyModule local = referenceLayer(c.spatial.size(), c.options);
      if (c.options.affine()) {
        torch::NoGradGuard no_grad;
        local.ptr()->named_parameters()["weight"].copy_(sync->weight);
        local.ptr()->named_parameters()["bias"].copy_(sync->bias);
      }
      expected = local.forward(mine(x_all, c.batch_per_rank));
    }
    torch::Tensor got;
    for (int pass = 0; pass <= rank_; ++pass) got = sync->forward(mine(x_all, c.batch_per_rank));
    close(c.name + ": eval output", got, expected);
  }

  // One sample per rank: fine in any group (a rank adds L values per
  // channel); an error only when all ranks together hold one value.
  void oneSamplePerRank() {
    layer({"one (N=1, C, L) sample per rank",
           {4},
           std::vector<int64_t>(world_, 1),
           nn::BatchNormOptions(3)});
    if (world_ > 1) return;
    SyncBatchNorm sync(nn::BatchNormOptions(3), group_);
    std::string message;
    try {
      sync->forward(torch::randn({1, 3}));
    } catch (const InvalidArgumentError& e) {
      message = e.what();
    }
    record("a single value per channel over all ranks is an error",
           message.find("expected more than 1 value per channel over all ranks when training, "
                        "got 1 (this rank's input is [1, 3])") != std::string::npos,
           "message: '" + message + "'");
  }

  std::vector<Case> cases() const {
    std::vector<int64_t> equal(world_, 4), unequal;
    // At least 3 rows: with 2 values per channel the input gradient is
    // zero up to eps, and relative errors of rounding noise mean nothing.
    for (int r = 0; r < world_; ++r) unequal.push_back(3 + 2 * r);
    return {
        {"(N,C) equal batches", {}, equal, nn::BatchNormOptions(5)},
        {"(N,C) unequal batches", {}, unequal, nn::BatchNormOptions(5)},
        {"(N,C,L) unequal batches, momentum 0.3",
         {7},
         unequal,
         nn::BatchNormOptions(4).momentum(0.3)},
        {"(N,C,H,W) equal batches", {5, 6}, equal, nn::BatchNormOptions(3)},
        {"(N,C,H,W) unequal batches, cumulative average",
         {4, 3},
         unequal,
         nn::BatchNormOptions(3).momentum(c10::nullopt)},
        {"(N,C,D,H,W) unequal batches", {3, 4, 2}, unequal, nn::BatchNormOptions(2)},
        {"(N,C,H,W) no affine", {3, 3}, unequal, nn::BatchNormOptions(3).affine(false)},
        {"(N,C,L) no running statistics",
         {5},
         unequal,
         nn::BatchNormOptions(2).track_running_stats(false)},
    };
  }

  // A ConvNet trained a little (BatchNorm2d in Sequentials), converted: its
  // values are kept (the very tensors), eval outputs are unchanged, and
  // DDP training with it equals one process on the concatenated batch.
  void convertedConvNet() {
    using examples::ConvNet;
    torch::manual_seed(31);
    ConvNet net, reference;
    auto train_locally = [](ConvNet& model) {
      torch::optim::SGD optimizer(model->parameters(), 0.05);
      for (int step = 0; step < 2; ++step) {
        torch::manual_seed(300 + step);
        auto x = torch::randn({6, 1, 28, 28});
        auto y = torch::randint(0, 10, {6});
        optimizer.zero_grad();
        torch::cross_entropy_loss(model->forward(x), y).backward();
        optimizer.step();
      }
    };
    {
      torch::NoGradGuard no_grad;
      auto from = net->named_parameters(), to = reference->named_parameters();
      for (auto& item : from) to[item.key()].copy_(item.value());
    }
    train_locally(net);
    train_locally(reference);
    net->eval();
    torch::manual_seed(400);
    auto probe = torch::randn({3, 1, 28, 28});
    auto before = net->forward(probe);
    std::vector<torch::Tensor> tensors_before;
    for (auto& t : net->parameters()) tensors_before.push_back(t);
    for (auto& t : net->buffers()) tensors_before.push_back(t);
    auto root = convert_sync_batchnorm(net.ptr(), group_);
    record("converting a ConvNet returns the same root", root.get() == net.ptr().get(), "another");
    std::vector<torch::Tensor> tensors_after;
    for (auto& t : net->parameters()) tensors_after.push_back(t);
    for (auto& t : net->buffers()) tensors_after.push_back(t);
    bool same = tensors_before.size() == tensors_after.size();
    for (size_t i = 0; same && i < tensors_after.size(); ++i) {
      same = tensors_before[i].is_same(tensors_after[i]);
    }
    record("converted ConvNet keeps its trained parameters and buffers (the same tensors)", same,
           "they changed");
    record("BatchNorm2d became ddp::nn::SyncBatchNorm inside the Sequentials",
           net->layer1->ptr(1)->as<SyncBatchNormImpl>() != nullptr &&
               net->layer2->ptr(1)->as<SyncBatchNormImpl>() != nullptr,
           "they did not");
    close("converted ConvNet in eval mode gives the same output", net->forward(probe), before);

    net->train();
    DistributedDataParallel model(net, group_);
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    torch::optim::SGD reference_optimizer(reference->parameters(),
                                          torch::optim::SGDOptions(0.05).momentum(0.9));
    const std::vector<int64_t> sizes(world_, 3);
    for (int step = 0; step < 3; ++step) {
      torch::manual_seed(500 + step);
      auto x = torch::randn({3 * world_, 1, 28, 28});
      auto y = torch::randint(0, 10, {3 * world_});
      optimizer.zero_grad();
      torch::cross_entropy_loss(model->forward(mine(x, sizes)), mine(y, sizes)).backward();
      optimizer.step();
      reference_optimizer.zero_grad();
      torch::cross_entropy_loss(reference->forward(x), y).backward();
      reference_optimizer.step();
    }
    auto got = net->parameters(), expected = reference->parameters();
    float worst = 0;
    for (size_t i = 0; i < got.size(); ++i)
      worst = maxKeepingNaN(worst, relativeError(got[i], expected[i]));
    record("SyncBatchNorm ConvNet under DDP trains as one process on the whole batch",
           worst <= kTolerance, "max relative error " + std::to_string(worst));
    auto got_buffers = net->buffers(), expected_buffers = reference->buffers();
    worst = 0;
    for (size_t i = 0; i < got_buffers.size(); ++i) {
      worst = maxKeepingNaN(worst, relativeError(got_buffers[i], expected_buffers[i]));
    }
    record("its running statistics equal the whole batch's", worst <= kTolerance,
           "max relative error " + std::to_string(worst));
  }

 private:
  std::shared_ptr<ProcessGroup> group_;
  int rank_, world_;
  NamedChecks checks_;
};

}  // namespace

int checkSyncBatchNorm(const std::shared_ptr<ProcessGroup>& group) {
  Checker checker(group);
  for (const auto& c : checker.cases()) checker.layer(c);
  checker.oneSamplePerRank();
  checker.convertedConvNet();
  return checker.failed();
}

}  // namespace ddp::testing

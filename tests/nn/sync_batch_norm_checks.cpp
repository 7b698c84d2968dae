// SyncBatchNorm on each rank of a real process group against one process
// running BatchNorm on the concatenated batch of all ranks.

#include "nn/sync_batch_norm_checks.hpp"

#include <torch/torch.h>

#include <functional>
#include <numeric>
#include <optional>
#include <string>
#include <vector>

#include "common/models.hpp"
#include "common/named_checks.hpp"
#include "common/relative_error.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/nn/sync_batch_norm.hpp"
#include "ddp/parallel/distributed_data_parallel.hpp"

namespace ddp::testing {
namespace {

namespace nn = torch::nn;
using ddp::nn::convert_sync_batchnorm;
using ddp::nn::SyncBatchNorm;
using ddp::nn::SyncBatchNormImpl;
constexpr float kTolerance = 1e-5f;

using sync_batch_norm_check::LayerCase;
using sync_batch_norm_check::Rows;

class Checker {
 public:
  explicit Checker(std::shared_ptr<ProcessGroup> group)
      : group_(std::move(group)), rank_(group_->rank()), world_(group_->size()) {}

  int failed() const { return checks_.failed(); }

  void close(const std::string& what, const torch::Tensor& got, const torch::Tensor& expected) {
    const double error = relative_error(got, expected);
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
  torch::Tensor sum_over_ranks(const torch::Tensor& t) const {
    torch::Tensor total = t.detach().clone().contiguous();
    group_->all_reduce(total, ReduceOp::kSum);
    return total;
  }

  static nn::AnyModule reference_layer(size_t spatial_dims, const nn::BatchNormOptions& options) {
    if (spatial_dims <= 1) return nn::AnyModule(nn::BatchNorm1d(options));
    if (spatial_dims == 2) return nn::AnyModule(nn::BatchNorm2d(options));
    return nn::AnyModule(nn::BatchNorm3d(options));
  }

  // Every rank's batch size in case `c`.
  std::vector<int64_t> batches_per_rank(const LayerCase& c) const {
    std::vector<int64_t> sizes;
    for (int r = 0; r < world_; ++r) {
      sizes.push_back(c.rows == Rows::kEqual ? 4 : c.rows == Rows::kUnequal ? 3 + 2 * r : 1);
    }
    return sizes;
  }

  // kSteps training steps, then eval, comparing everything on the way.
  void layer(const LayerCase& c) {
    using namespace sync_batch_norm_check;  // NOLINT(google-build-using-namespace)
    const std::vector<int64_t> batch_per_rank = batches_per_rank(c);
    const int64_t channels = c.options.num_features();
    nn::AnyModule reference = reference_layer(c.spatial.size(), c.options);
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
    const int64_t total = std::accumulate(batch_per_rank.begin(), batch_per_rank.end(), int64_t{0});
    std::vector<int64_t> shape{total, channels};
    shape.insert(shape.end(), c.spatial.begin(), c.spatial.end());
    for (int step = 0; step < kSteps; ++step) {
      torch::manual_seed(100 + step);
      torch::Tensor x_all = (torch::randn(shape) * 2 + 0.7).requires_grad_();
      torch::Tensor upstream = torch::randn(shape);
      torch::Tensor y_all = reference.forward(x_all);
      (y_all * upstream).sum().backward();

      torch::Tensor x = mine(x_all, batch_per_rank).detach().clone().requires_grad_();
      torch::Tensor y = sync->forward(x);
      (y * mine(upstream, batch_per_rank)).sum().backward();

      const std::string at = at_step(c, step);
      close(check_name(at, kOutput), y, mine(y_all, batch_per_rank));
      close(check_name(at, kInputGradient), x.grad(), mine(x_all.grad(), batch_per_rank));
      if (c.options.affine()) {
        close(check_name(at, kWeightGradient), sum_over_ranks(sync->weight.grad()),
              ref_params["weight"].grad());
        close(check_name(at, kBiasGradient), sum_over_ranks(sync->bias.grad()),
              ref_params["bias"].grad());
        sync->weight.mutable_grad().zero_();
        sync->bias.mutable_grad().zero_();
        ref_params["weight"].mutable_grad().zero_();
        ref_params["bias"].mutable_grad().zero_();
      }
    }
    if (c.options.track_running_stats()) {
      close(check_name(c.name, kRunningMean), sync->running_mean, ref_buffers["running_mean"]);
      close(check_name(c.name, kRunningVariance), sync->running_var, ref_buffers["running_var"]);
      record(check_name(c.name, kBatchesTracked),
             sync->num_batches_tracked.item<int64_t>() == kSteps &&
                 ref_buffers["num_batches_tracked"].item<int64_t>() == kSteps,
             "got " + std::to_string(sync->num_batches_tracked.item<int64_t>()) + " (reference " +
                 std::to_string(ref_buffers["num_batches_tracked"].item<int64_t>()) +
                 "), expected " + std::to_string(kSteps));
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
      expected = mine(reference.forward(x_all), batch_per_rank);
    } else {  // each rank normalizes with its own batch
      nn::AnyModule local = reference_layer(c.spatial.size(), c.options);
      if (c.options.affine()) {
        torch::NoGradGuard no_grad;
        local.ptr()->named_parameters()["weight"].copy_(sync->weight);
        local.ptr()->named_parameters()["bias"].copy_(sync->bias);
      }
      expected = local.forward(mine(x_all, batch_per_rank));
    }
    torch::Tensor got;
    for (int pass = 0; pass <= rank_; ++pass) got = sync->forward(mine(x_all, batch_per_rank));
    close(check_name(c.name, kEvalOutput), got, expected);
  }

  // One sample per rank: fine in any group (a rank adds L values per
  // channel); an error only when all ranks together hold one value.
  void one_sample_per_rank() {
    layer(sync_batch_norm_check::one_sample_per_rank());
    if (world_ > 1) return;
    SyncBatchNorm sync(nn::BatchNormOptions(3), group_);
    std::string message;
    try {
      sync->forward(torch::randn({1, 3}));
    } catch (const InvalidArgumentError& e) {
      message = e.what();
    }
    record(sync_batch_norm_check::kSingleValue,
           message.find("expected more than 1 value per channel over all ranks when training, "
                        "got 1 (this rank's input is [1, 3])") != std::string::npos,
           "message: '" + message + "'");
  }

  // A ConvNet trained a little (BatchNorm2d in Sequentials), converted: its
  // values are kept (the very tensors), eval outputs are unchanged, and
  // DDP training with it equals one process on the concatenated batch.
  void converted_conv_net() {
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
    record(sync_batch_norm_check::kSameRoot, root.get() == net.ptr().get(), "another");
    std::vector<torch::Tensor> tensors_after;
    for (auto& t : net->parameters()) tensors_after.push_back(t);
    for (auto& t : net->buffers()) tensors_after.push_back(t);
    bool same = tensors_before.size() == tensors_after.size();
    for (size_t i = 0; same && i < tensors_after.size(); ++i) {
      same = tensors_before[i].is_same(tensors_after[i]);
    }
    record(sync_batch_norm_check::kSameTensors, same, "they changed");
    record(sync_batch_norm_check::kConverted,
           net->layer1->ptr(1)->as<SyncBatchNormImpl>() != nullptr &&
               net->layer2->ptr(1)->as<SyncBatchNormImpl>() != nullptr,
           "they did not");
    close(sync_batch_norm_check::kSameEvalOutput, net->forward(probe), before);

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
    double worst = worst_relative_error(net->parameters(), reference->parameters());
    record(sync_batch_norm_check::kTrainsAsOneProcess, worst <= kTolerance,
           "max relative error " + std::to_string(worst));
    worst = worst_relative_error(net->buffers(), reference->buffers());
    record(sync_batch_norm_check::kRunningStatistics, worst <= kTolerance,
           "max relative error " + std::to_string(worst));
  }

 private:
  std::shared_ptr<ProcessGroup> group_;
  int rank_, world_;
  NamedChecks checks_;
};

}  // namespace

int check_sync_batch_norm(const std::shared_ptr<ProcessGroup>& group) {
  Checker checker(group);
  for (const auto& c : sync_batch_norm_check::layer_cases()) checker.layer(c);
  checker.one_sample_per_rank();
  checker.converted_conv_net();
  return checker.failed();
}

}  // namespace ddp::testing

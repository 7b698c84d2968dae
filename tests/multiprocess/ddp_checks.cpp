#include "multiprocess/ddp_checks.hpp"

#include <torch/torch.h>

#include <cmath>
#include <functional>
#include <iomanip>
#include <set>
#include <sstream>

#include "base/dtype_name.hpp"
#include "common/models.hpp"
#include "common/named_checks.hpp"
#include "common/relative_error.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/parallel/distributed_data_parallel.hpp"
#include "multiprocess/branch_net.hpp"

namespace ddp::testing {
namespace {

namespace nn = torch::nn;
using examples::ConvNet;
using examples::Mlp;

constexpr int64_t kPerRank = 4;  // samples per rank and step
constexpr int kSteps = 4;

// BranchNet's branch is used only on some steps by some ranks.
bool branch_used(int step, int rank) { return (step + rank) % 3 == 0; }

// The whole step's data, identical on every rank: rank r trains on chunk r.
struct Batch {
  torch::Tensor x, y;
};
Batch make_batch(int step, int64_t rows, std::vector<int64_t> feature_shape, bool classes) {
  torch::manual_seed(1000 + step);
  feature_shape.insert(feature_shape.begin(), rows);
  Batch b{torch::randn(feature_shape), {}};
  b.y = classes ? torch::randint(0, 10, {rows}) : torch::randn({rows, 4});
  return b;
}

class DdpChecker {
 public:
  explicit DdpChecker(const std::shared_ptr<ProcessGroup>& group)
      : group_(group), rank_(group->rank()), world_(group->size()) {}

  void expect_close(const std::string& what, const std::vector<torch::Tensor>& got,
                    const std::vector<torch::Tensor>& expected, float tolerance) {
    if (got.size() != expected.size()) {
      record(what, false,
             std::to_string(got.size()) + " tensors, expected " + std::to_string(expected.size()));
      return;
    }
    double worst = 0;
    size_t worst_at = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      const double error = relative_error(got[i], expected[i]);
      // A NaN is the worst error of all (std::max would drop it).
      if (!std::isnan(worst) && (std::isnan(error) || error > worst)) worst = error, worst_at = i;
    }
    record(what, worst <= tolerance,
           "max relative error " + std::to_string(worst) + " (tensor #" + std::to_string(worst_at) +
               ") > tolerance " + std::to_string(tolerance));
  }

  void record(const std::string& what, bool ok, const std::string& detail) {
    checks_.check(what, ok, detail);
  }

  torch::Tensor mine(const torch::Tensor& whole) const {
    return whole.narrow(0, rank_ * kPerRank, kPerRank);
  }
  torch::Tensor chunk(const torch::Tensor& whole, int r) const {
    return whole.narrow(0, r * kPerRank, kPerRank);
  }

  // Trains an MLP with DDP (rank-dependent initial weights: DDP must copy
  // rank 0's) and returns its final parameters.
  std::vector<torch::Tensor> train_mlp(DistributedDataParallelOptions options, int micro_batches,
                                       ReducerStats* stats = nullptr) {
    torch::manual_seed(7 + rank_);
    DistributedDataParallel model(Mlp(8, 16, 4), options, group_);
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int step = 0; step < kSteps; ++step) {
      optimizer.zero_grad();
      for (int m = 0; m < micro_batches; ++m) {
        Batch b = make_batch(step * 10 + m, world_ * kPerRank, {8}, false);
        auto pass = [&] { torch::mse_loss(model->forward(mine(b.x)), mine(b.y)).backward(); };
        if (m + 1 < micro_batches) {
          auto guard = model->no_sync();
          pass();
        } else {
          pass();
        }
      }
      optimizer.step();
    }
    if (stats) *stats = model->stats();
    return model->parameters();
  }

  // The same in one process on all ranks' data: per rank chunk, per
  // micro-batch, gradients summed over micro-batches, averaged over ranks.
  std::vector<torch::Tensor> reference_mlp(int micro_batches) {
    torch::manual_seed(7);
    Mlp model(8, 16, 4);
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int step = 0; step < kSteps; ++step) {
      optimizer.zero_grad();
      for (int m = 0; m < micro_batches; ++m) {
        Batch b = make_batch(step * 10 + m, world_ * kPerRank, {8}, false);
        for (int r = 0; r < world_; ++r) {
          (torch::mse_loss(model->forward(chunk(b.x, r)), chunk(b.y, r)) / world_).backward();
        }
      }
      optimizer.step();
    }
    return model->parameters();
  }

  void mlp() {
    auto expected = reference_mlp(1);
    expect_close(ddp_check::kMlp, train_mlp({}, 1), expected, 1e-5f);
    auto with_views = train_mlp(DistributedDataParallelOptions().gradient_as_bucket_view(true), 1);
    auto without = train_mlp(DistributedDataParallelOptions().gradient_as_bucket_view(false), 1);
    bool identical = true;
    for (size_t i = 0; i < with_views.size(); ++i)
      identical &= torch::equal(with_views[i], without[i]);
    record(ddp_check::kBucketViewIdentical, identical, "they differ");
    // Identical parameters would also come from an option that does nothing:
    // with it the gradients must share the (single) bucket's memory, without
    // it each its own.
    auto storages = [](const std::vector<torch::Tensor>& parameters) {
      std::set<const void*> distinct;
      for (const auto& p : parameters) distinct.insert(p.grad().storage().data_ptr().get());
      return distinct.size();
    };
    record(ddp_check::kBucketViewShared,
           storages(with_views) == 1 && storages(without) == without.size(),
           "gradients in " + std::to_string(storages(with_views)) + " storage(s) with views, " +
               std::to_string(storages(without)) + " without (expected 1 and " +
               std::to_string(without.size()) + ")");
    expect_close(ddp_check::kTinyBuckets,
                 train_mlp(DistributedDataParallelOptions()
                               .bucket_cap_mb(0.0001)
                               .first_bucket_cap_mb(0.0001)
                               .delay_allreduce(true),
                           1),
                 expected, 1e-5f);
    ReducerStats stats;
    expect_close(ddp_check::kNoSync, train_mlp({}, 2, &stats), reference_mlp(2), 1e-5f);
    // Reducing inside no_sync() too would give the same average: the number
    // of reductions tells them apart.
    record(ddp_check::kNoSyncReducesOnce, stats.synchronized_iterations == kSteps,
           std::to_string(stats.synchronized_iterations) + " reductions in " +
               std::to_string(kSteps) + " steps of 2 micro-batches");
  }

  // BatchNorm keeps per-rank batch statistics, so the reference runs each
  // rank's chunk separately; the buffers follow rank 0 (broadcast_buffers).
  void conv_net() {
    std::vector<torch::Tensor> buffers_after_mine;  // rank 0's, then this rank's batch
    torch::manual_seed(11 + rank_);
    DistributedDataParallel model(ConvNet(), group_);
    torch::manual_seed(11);
    ConvNet reference;
    torch::optim::SGD optimizer(model->parameters(), 0.05);
    torch::optim::SGD reference_optimizer(reference->parameters(), 0.05);
    for (int step = 0; step < kSteps; ++step) {
      Batch b = make_batch(step, world_ * kPerRank, {1, 28, 28}, true);
      optimizer.zero_grad();
      torch::cross_entropy_loss(model->forward(mine(b.x)), mine(b.y)).backward();
      optimizer.step();

      reference_optimizer.zero_grad();
      std::vector<torch::Tensor> buffers_after_rank0;
      for (int r = 0; r < world_; ++r) {
        auto saved = clone(reference->buffers());
        (torch::cross_entropy_loss(reference->forward(chunk(b.x, r)), chunk(b.y, r)) / world_)
            .backward();
        if (r == 0) buffers_after_rank0 = clone(reference->buffers());
        if (r == rank_) buffers_after_mine = clone(reference->buffers());
        assign(reference->buffers(), saved);
      }
      assign(reference->buffers(), buffers_after_rank0);
      reference_optimizer.step();
    }
    auto module = model->module();
    expect_close(ddp_check::kConvNet, module->parameters(), reference->parameters(), 1e-5f);
    if (rank_ == 0) {
      expect_close(ddp_check::kConvNetBuffersOnRank0, module->buffers(), reference->buffers(),
                   1e-5f);
    } else {
      // Rank 0's own buffers are the same with or without broadcast_buffers;
      // another rank's show it: rank 0's before the last step, then updated
      // by this rank's last batch.
      expect_close(ddp_check::kConvNetBuffersElsewhere, module->buffers(), buffers_after_mine,
                   1e-5f);
    }
  }

  void unused_branch() {
    torch::manual_seed(21 + rank_);
    DistributedDataParallel model(
        BranchNet(), DistributedDataParallelOptions().find_unused_parameters(true), group_);
    torch::manual_seed(21);
    BranchNet reference;
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    torch::optim::SGD reference_optimizer(reference->parameters(),
                                          torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int step = 0; step < kSteps + 2; ++step) {
      Batch b = make_batch(step, world_ * kPerRank, {8}, false);
      optimizer.zero_grad();
      auto out = model->forward(mine(b.x), branch_used(step, rank_));
      torch::mse_loss(out, mine(b.y).narrow(1, 0, 2)).backward();
      optimizer.step();
      reference_optimizer.zero_grad();
      for (int r = 0; r < world_; ++r) {
        auto ref_out = reference->forward(chunk(b.x, r), branch_used(step, r));
        (torch::mse_loss(ref_out, chunk(b.y, r).narrow(1, 0, 2)) / world_).backward();
      }
      reference_optimizer.step();
    }
    expect_close(ddp_check::kUnusedBranch, model->module()->parameters(), reference->parameters(),
                 1e-5f);
  }

  // One step's gradients through a 16-bit hook: close to the float32
  // average, and really compressed: the hook copies the 16-bit sum back, so
  // every gradient element is a value of the wire type (a float32 reduction
  // gives values that are not, at every world size).
  void compression_hook(std::shared_ptr<CommHook> hook, at::ScalarType wire, float tolerance) {
    const std::string name = hook->name();
    torch::manual_seed(31);
    DistributedDataParallel model(Mlp(8, 16, 4), DistributedDataParallelOptions().comm_hook(hook),
                                  group_);
    torch::manual_seed(31);
    Mlp reference(8, 16, 4);
    Batch b = make_batch(0, world_ * kPerRank, {8}, false);
    torch::mse_loss(model->forward(mine(b.x)), mine(b.y)).backward();
    torch::mse_loss(reference->forward(b.x), b.y).backward();
    std::vector<torch::Tensor> grads, expected;
    for (size_t i = 0; i < reference->parameters().size(); ++i) {
      grads.push_back(model->parameters()[i].grad());
      expected.push_back(reference->parameters()[i].grad());
    }
    expect_close(ddp_check::hook_precision(name), grads, expected, tolerance);
    std::string not_representable;
    for (const auto& item : model->named_parameters()) {
      const torch::Tensor grad = item.value().grad().reshape({-1});
      const torch::Tensor rounded = grad.to(wire).to(torch::kFloat);
      if (rounded.equal(grad)) continue;
      const int64_t j = (rounded != grad).nonzero()[0][0].item<int64_t>();
      std::ostringstream text;
      text << std::setprecision(9) << item.key() << "'s gradient [" << j << "] is "
           << grad[j].item<float>() << ", which " << base::detail::dtype_name(wire) << " rounds to "
           << rounded[j].item<float>();
      not_representable = text.str();
      break;
    }
    record(ddp_check::hook_representable(name, wire), not_representable.empty(), not_representable);
  }

  // With buckets small enough that the MLP needs several, every bucket's
  // reduction starts from a gradient hook, before backward returns; with
  // delay_allreduce none does.
  void overlap() {
    for (bool delay : {false, true}) {
      DistributedDataParallel model(Mlp(64, 256, 64),
                                    DistributedDataParallelOptions()
                                        .first_bucket_cap_mb(0.05)
                                        .bucket_cap_mb(0.2)
                                        .delay_allreduce(delay),
                                    group_);
      for (int step = 0; step < 2; ++step) {
        torch::mse_loss(model->forward(torch::randn({kPerRank, 64})), torch::randn({kPerRank, 64}))
            .backward();
      }
      const ReducerStats stats = model->stats();
      const int buckets = static_cast<int>(stats.bucket_bytes.size());
      const int expected = delay ? 0 : buckets;
      record(delay ? ddp_check::kOverlapDelayed : ddp_check::kOverlap,
             buckets >= 3 && stats.launched_during_backward == expected && stats.rebuilt &&
                 stats.synchronized_iterations == 2,
             std::to_string(stats.launched_during_backward) + " of " + std::to_string(buckets) +
                 " buckets started during backward, expected " + std::to_string(expected) +
                 " (of at least 3)");
    }
  }

  int run() {
    mlp();
    conv_net();
    unused_branch();
    compression_hook(fp16_compress_hook(), at::kHalf, 2e-3f);
    compression_hook(bf16_compress_hook(), at::kBFloat16, 1.6e-2f);
    overlap();
    return checks_.failed();
  }

 private:
  static std::vector<torch::Tensor> clone(const std::vector<torch::Tensor>& tensors) {
    std::vector<torch::Tensor> copies;
    for (const auto& t : tensors) copies.push_back(t.clone());
    return copies;
  }
  static void assign(const std::vector<torch::Tensor>& targets,
                     const std::vector<torch::Tensor>& values) {
    torch::NoGradGuard no_grad;
    for (size_t i = 0; i < targets.size(); ++i) targets[i].copy_(values[i]);
  }

  std::shared_ptr<ProcessGroup> group_;
  int rank_, world_;
  NamedChecks checks_;
};

}  // namespace

int check_distributed_data_parallel(const std::shared_ptr<ProcessGroup>& group) {
  return DdpChecker(group).run();
}

void wrap_mismatched_model(const std::shared_ptr<ProcessGroup>& group) {
  const int64_t hidden = group->rank() == group->size() - 1 ? 17 : 16;
  DistributedDataParallel model(Mlp(8, hidden, 4), group);
}

void train_with_unused_parameter(const std::shared_ptr<ProcessGroup>& group) {
  DistributedDataParallel model(BranchNet(), group);
  torch::mse_loss(model->forward(torch::randn({kPerRank, 8}), false), torch::randn({kPerRank, 2}))
      .backward();
}

}  // namespace ddp::testing

#include "multiprocess/powersgd_checks.hpp"

#include <torch/torch.h>

#include <string>
#include <vector>

#include "common/models.hpp"
#include "common/named_checks.hpp"
#include "common/relative_error.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/parallel/distributed_data_parallel.hpp"
#include "ddp/parallel/powersgd_hook.hpp"

namespace ddp::testing {
namespace {

using Shapes = std::vector<std::vector<int64_t>>;

// A bucket laid out as DistributedDataParallel hands it to a hook.
GradBucket make_bucket(const Shapes& shapes) {
  int64_t total = 0;
  for (const auto& shape : shapes) total += c10::multiply_integers(shape);
  GradBucket bucket;
  bucket.buffer = torch::zeros({total});
  bucket.is_last = true;
  int64_t offset = 0;
  for (const auto& shape : shapes) {
    const int64_t numel = c10::multiply_integers(shape);
    bucket.gradients.push_back(bucket.buffer.narrow(0, offset, numel).view(shape));
    offset += numel;
  }
  return bucket;
}

// Rank r's gradients at `iteration`, the same wherever they are computed.
torch::Tensor gradients_of(int rank, int iteration, int64_t numel) {
  torch::manual_seed(900 + 31 * rank + iteration);
  return torch::randn({numel});
}

torch::Tensor mean_gradients(int world, int iteration, int64_t numel) {
  torch::Tensor sum = torch::zeros({numel});
  for (int r = 0; r < world; ++r) sum += gradients_of(r, iteration, numel);
  return sum / world;
}

class PowerSgdChecker {
 public:
  explicit PowerSgdChecker(std::shared_ptr<ProcessGroup> group)
      : group_(std::move(group)), rank_(group_->rank()), world_(group_->size()) {}

  // One iteration: this rank's gradients in, the hook's result out.
  torch::Tensor step(PowerSgdHook& hook, GradBucket& bucket, const torch::Tensor& gradients) {
    bucket.buffer.copy_(gradients);
    hook.reduce(*group_, bucket).wait();
    return bucket.buffer.clone();
  }

  void full_rank() {
    PowerSgdHook hook(
        PowerSgdOptions().matrix_approximation_rank(5).start_iteration(2).min_compression_rate(0));
    GradBucket bucket = make_bucket({{8, 5}, {5}, {16, 3}});
    const int64_t n = bucket.buffer.numel();
    double plain_error = 0, compressed_error = 0;
    int64_t sent_before = 0, sent_per_iteration = -1;
    bool same_sent = true;
    for (int it = 0; it < 5; ++it) {
      const torch::Tensor out = step(hook, bucket, gradients_of(rank_, it, n));
      const double e = relative_error(out, mean_gradients(world_, it, n));
      (it < 2 ? plain_error : compressed_error) =
          std::max(it < 2 ? plain_error : compressed_error, e);
      if (it >= 2) {
        const int64_t sent = hook.communicated_elements() - sent_before;
        if (sent_per_iteration >= 0 && sent != sent_per_iteration) same_sent = false;
        sent_per_iteration = sent;
      }
      sent_before = hook.communicated_elements();
    }
    checks_.check(powersgd_check::kPlainBeforeStart, plain_error <= 1e-6,
                  "max relative error " + std::to_string(plain_error));
    checks_.check(powersgd_check::kFullRankEqualsAverage, compressed_error <= 1e-5,
                  "max relative error " + std::to_string(compressed_error));
    // 5 (vector) + P: 8x5 + 16x3 + Q: 5x5 + 3x3.
    checks_.check(powersgd_check::kFullRankSent, same_sent && sent_per_iteration == 127,
                  "sent " + std::to_string(sent_per_iteration) +
                      (same_sent ? "" : " (not the same every iteration)"));
  }

  // sum_t out_t + mean_r(E_r) = sum_t mean_r(G_r,t): error feedback loses
  // nothing, it only delays.
  void error_feedback() {
    PowerSgdHook hook(PowerSgdOptions().matrix_approximation_rank(1).start_iteration(2));
    GradBucket bucket = make_bucket({{32, 16}, {16}, {24, 8, 2}});
    const int64_t n = bucket.buffer.numel();
    torch::Tensor applied = torch::zeros({n}), truth = torch::zeros({n});
    double lossy = 0;
    for (int it = 0; it < 6; ++it) {
      const torch::Tensor mean = mean_gradients(world_, it, n);
      const torch::Tensor out = step(hook, bucket, gradients_of(rank_, it, n));
      applied += out;
      truth += mean;
      lossy = std::max(lossy, relative_error(out, mean));
    }
    torch::Tensor error = hook.error(0).clone();
    group_->all_reduce(error, ReduceOp::kSum);
    checks_.close(powersgd_check::kErrorFeedbackSum, applied + error / world_, truth, 1e-5);
    checks_.check(powersgd_check::kErrorFeedbackLossy, lossy > 0.1,
                  "max relative difference " + std::to_string(lossy));
  }

  void what_is_compressed() {
    PowerSgdHook hook(PowerSgdOptions().matrix_approximation_rank(2).start_iteration(2));
    GradBucket bucket = make_bucket({{4, 4}, {64}, {64, 64}});
    const int64_t n = bucket.buffer.numel();
    double small_error = 0, large_error = 0;
    int64_t sent = 0;
    for (int it = 0; it < 3; ++it) {
      const int64_t before = hook.communicated_elements();
      const torch::Tensor out = step(hook, bucket, gradients_of(rank_, it, n));
      sent = hook.communicated_elements() - before;
      const torch::Tensor mean = mean_gradients(world_, it, n);
      small_error =
          std::max(small_error, relative_error(out.narrow(0, 0, 80), mean.narrow(0, 0, 80)));
      if (it == 2) {
        large_error = relative_error(out.narrow(0, 80, 4096), mean.narrow(0, 80, 4096));
      }
    }
    checks_.check(powersgd_check::kRate2SmallExact, small_error <= 1e-6,
                  "max relative error " + std::to_string(small_error));
    checks_.check(powersgd_check::kRate2LargeCompressed, large_error > 0.1,
                  "relative difference from the mean " + std::to_string(large_error));
    checks_.check(powersgd_check::kRate2Sent, sent == 336, "sent " + std::to_string(sent));
  }

  // The same gradients every iteration, no error feedback: warm-started
  // power iteration converges to the top singular pair of the mean.
  void warm_start() {
    torch::manual_seed(77);
    const torch::Tensor u = std::get<0>(torch::linalg_qr(torch::randn({24, 6})));
    const torch::Tensor v = std::get<0>(torch::linalg_qr(torch::randn({12, 6})));
    const torch::Tensor sigma = torch::tensor({8.0, 4.0, 2.0, 1.0, 0.5, 0.25});
    const torch::Tensor mean = u.mm(torch::diag(sigma)).mm(v.t());
    // Rank r holds mean + (r == 0 ? d : -d): the same mean on 2 ranks.
    torch::manual_seed(78);
    const torch::Tensor d = torch::randn({24, 12});
    const torch::Tensor mine = mean + (rank_ == 0 ? d : -d);
    const double best =
        torch::sqrt((sigma.narrow(0, 1, 5) * sigma.narrow(0, 1, 5)).sum()).item<double>();

    PowerSgdHook warm(
        PowerSgdOptions().matrix_approximation_rank(1).start_iteration(2).use_error_feedback(
            false));
    GradBucket bucket = make_bucket({{24, 12}});
    double error = 0;
    for (int it = 0; it < 30; ++it) {
      error = (step(warm, bucket, mine.reshape({-1})).view({24, 12}) - mean).norm().item<double>();
    }
    checks_.check(powersgd_check::kWarmStart, error <= best * 1.001,
                  "error " + std::to_string(error) + ", best " + std::to_string(best));

    PowerSgdHook cold(PowerSgdOptions()
                          .matrix_approximation_rank(1)
                          .start_iteration(0)
                          .use_error_feedback(false)
                          .warm_start(false));
    const torch::Tensor first = step(cold, bucket, mine.reshape({-1}));
    const torch::Tensor second = step(cold, bucket, mine.reshape({-1}));
    checks_.check(powersgd_check::kColdStart, relative_error(second, first) > 1e-3,
                  "two iterations differ by " + std::to_string(relative_error(second, first)));
  }

  void validation() {
    std::string message;
    try {
      PowerSgdHook hook(PowerSgdOptions().start_iteration(1));
    } catch (const ConfigError& e) {
      message = e.what();
    }
    checks_.check(powersgd_check::kValidation,
                  message.find("PowerSgdHook: start_iteration is 1 with error feedback or warm "
                               "start; it must be at least 2") != std::string::npos,
                  "message: '" + message + "'");
  }

  // Full rank and rate 0: every matrix compressed, the average exact, so
  // training equals one process on the whole batch.
  void trains_as_one_process() {
    using examples::Mlp;
    constexpr int64_t kPerRank = 4;
    auto batch_of = [](int step) {
      torch::manual_seed(400 + step);
      return std::make_pair(torch::randn({kPerRank * 2, 8}), torch::randn({kPerRank * 2, 4}));
    };
    torch::manual_seed(3 + rank_);
    Mlp net(8, 16, 4);
    auto hook = std::make_shared<PowerSgdHook>(
        PowerSgdOptions().matrix_approximation_rank(16).start_iteration(2).min_compression_rate(0));
    DistributedDataParallel model(net, DistributedDataParallelOptions().comm_hook(hook), group_);
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int s = 0; s < 6; ++s) {
      auto [x, y] = batch_of(s);
      optimizer.zero_grad();
      torch::mse_loss(model->forward(x.chunk(world_)[rank_]), y.chunk(world_)[rank_]).backward();
      optimizer.step();
    }
    torch::manual_seed(3);
    Mlp reference(8, 16, 4);
    torch::optim::SGD reference_optimizer(reference->parameters(),
                                          torch::optim::SGDOptions(0.1).momentum(0.9));
    for (int s = 0; s < 6; ++s) {
      auto [x, y] = batch_of(s);
      reference_optimizer.zero_grad();
      torch::mse_loss(reference->forward(x), y).backward();
      reference_optimizer.step();
    }
    checks_.close_all(powersgd_check::kDdp, net->parameters(), reference->parameters(), 1e-5,
                      hook->iteration() == 6 ? ""
                                             : "hook saw " + std::to_string(hook->iteration()) +
                                                   " iterations, expected 6");
  }

  int failed() const { return checks_.failed(); }

 private:
  std::shared_ptr<ProcessGroup> group_;
  int rank_;
  int world_;
  NamedChecks checks_;
};

}  // namespace

int check_power_sgd(const std::shared_ptr<ProcessGroup>& group) {
  PowerSgdChecker checker(group);
  checker.full_rank();
  checker.error_feedback();
  checker.what_is_compressed();
  checker.warm_start();
  checker.validation();
  checker.trains_as_one_process();
  return checker.failed();
}

}  // namespace ddp::testing

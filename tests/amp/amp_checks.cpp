#include "amp/amp_checks.hpp"

#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "common/models.hpp"
#include "common/named_checks.hpp"
#include "common/relative_error.hpp"
#include "ddp/amp/grad_scaler.hpp"
#include "ddp/amp/mixed_precision.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/nn/sync_batch_norm.hpp"
#include "ddp/parallel/distributed_data_parallel.hpp"

namespace ddp::testing {
namespace {

namespace nn = torch::nn;
using amp::AmpOptions;
using amp::GradScaler;
using amp::GradScalerOptions;
using amp::MixedPrecision;
using amp::OptLevel;
using examples::ConvNet;
using examples::Mlp;

std::vector<torch::Tensor> snapshot_of(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> copies;
  for (const auto& t : tensors) copies.push_back(t.detach().clone());
  return copies;
}

bool all_equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i], b[i])) return false;
  }
  return true;
}

// Where `a` and `b` differ, for a failure message ("" when they are equal).
std::string first_difference(const std::vector<torch::Tensor>& a,
                             const std::vector<torch::Tensor>& b) {
  if (a.size() != b.size()) {
    return std::to_string(a.size()) + " tensors against " + std::to_string(b.size());
  }
  for (size_t i = 0; i < a.size(); ++i) {
    if (torch::equal(a[i], b[i])) continue;
    if (a[i].sizes() != b[i].sizes()) return "tensor #" + std::to_string(i) + " has another shape";
    const auto diff = (a[i].detach().to(torch::kDouble) - b[i].detach().to(torch::kDouble)).abs();
    return "tensor #" + std::to_string(i) + " differs by up to " +
           std::to_string(diff.max().item<double>());
  }
  return "";
}

class Checker {
 public:
  explicit Checker(std::shared_ptr<ProcessGroup> group)
      : group_(std::move(group)), rank_(group_->rank()), world_(group_->size()) {}

  int failed() const { return checks_.failed(); }

  void record(const std::string& what, bool ok, const std::string& detail) {
    checks_.check(what, ok, detail);
  }

  // "" when every tensor equals rank 0's, bit for bit, else the first
  // difference. A collective: every rank calls it in the same order.
  std::string difference_from_rank0(const std::vector<torch::Tensor>& tensors) {
    std::vector<torch::Tensor> rank0;
    for (const auto& t : tensors) {
      rank0.push_back(t.detach().clone().contiguous());
      group_->broadcast(rank0.back(), 0);
    }
    const std::string difference = first_difference(tensors, rank0);
    return difference.empty() ? "" : difference + " from rank 0's";
  }

  // Records that every tensor equals rank 0's.
  void record_same_on_every_rank(const std::string& what,
                                 const std::vector<torch::Tensor>& tensors) {
    const std::string difference = difference_from_rank0(tensors);
    record(what, difference.empty(), difference);
  }

  torch::Tensor mine(const torch::Tensor& whole, int64_t per_rank) const {
    return whole.narrow(0, rank_ * per_rank, per_rank);
  }

  // Gradients 0.25 * (rank + 1) * scale, so that unscaled they are exact;
  // the last rank's first element is `bad` when `inject`.
  void set_gradients(nn::Linear& model, double scale, bool inject, float bad) {
    for (auto& p : model->parameters()) {
      p.mutable_grad() = torch::full_like(p, 0.25 * (rank_ + 1) * scale);
      if (inject && rank_ == world_ - 1) p.mutable_grad().view(-1)[0] = bad;
    }
  }

  void scaler_overflow() {
    torch::manual_seed(1);
    nn::Linear model(4, 3);
    torch::optim::SGD optimizer(model->parameters(), 0.5);
    GradScaler scaler(
        GradScalerOptions().init_scale(1024).growth_interval(scaler_check::kCleanSteps), group_);
    const float bad_values[] = {std::numeric_limits<float>::infinity(),
                                std::numeric_limits<float>::quiet_NaN()};
    double expected_scale = 1024;
    for (float bad : bad_values) {
      const std::string subject =
          scaler_check::on_the_last_rank(std::isnan(bad) ? scaler_check::kNaN : scaler_check::kInf);
      auto before = snapshot_of(model->parameters());
      set_gradients(model, scaler.get_scale(), /*inject=*/true, bad);
      const bool stepped = scaler.step(optimizer);
      record(check_name(subject, scaler_check::kSkippedEverywhere), !stepped && scaler.found_inf(),
             std::string("step() returned ") + (stepped ? "true" : "false") + ", found_inf() " +
                 (scaler.found_inf() ? "true" : "false"));
      record(check_name(subject, scaler_check::kParametersUnchanged),
             all_equal(model->parameters(), before), first_difference(model->parameters(), before));
      scaler.update();
      expected_scale /= 2;
      record(check_name(subject, scaler_check::kScaleHalved),
             scaler.get_scale() == expected_scale && scaler.get_growth_tracker() == 0,
             "scale " + std::to_string(scaler.get_scale()) + ", growth tracker " +
                 std::to_string(scaler.get_growth_tracker()) + "; expected " +
                 std::to_string(expected_scale) + ", 0");
    }
    // Clean steps: exact unscaled gradients, growth after exactly 3 of them.
    for (int step = 1; step <= scaler_check::kCleanSteps; ++step) {
      auto before = snapshot_of(model->parameters());
      set_gradients(model, scaler.get_scale(), false, 0);
      const bool stepped = scaler.step(optimizer);
      std::vector<torch::Tensor> expected;
      for (const auto& b : before) {
        expected.push_back(b.add(torch::full_like(b, 0.25 * (rank_ + 1)), -0.5));
      }
      const bool exact = stepped && all_equal(model->parameters(), expected);
      record(check_name(scaler_check::clean_step(step), scaler_check::kUnscaledGradients), exact,
             stepped ? "parameters: " + first_difference(model->parameters(), expected)
                     : "the step was skipped");
      scaler.update();
      if (step == scaler_check::kCleanSteps) expected_scale *= 2;
      record(check_name(scaler_check::clean_step(step), scaler_check::kScaleAndTracker),
             scaler.get_scale() == expected_scale &&
                 scaler.get_growth_tracker() == step % scaler_check::kCleanSteps,
             "scale " + std::to_string(scaler.get_scale()) + ", tracker " +
                 std::to_string(scaler.get_growth_tracker()) + "; expected " +
                 std::to_string(expected_scale) + ", " +
                 std::to_string(step % scaler_check::kCleanSteps));
    }
    if (world_ > 1) {  // Why the group matters: alone, only the culprit skips.
      GradScaler alone(GradScalerOptions().init_scale(1024));
      set_gradients(model, alone.get_scale(), true, bad_values[0]);
      const bool stepped = alone.step(optimizer);
      record(scaler_check::kAloneOnlyCulpritSkips, stepped == (rank_ != world_ - 1),
             std::string("step() returned ") + (stepped ? "true" : "false") + " on rank " +
                 std::to_string(rank_) + " of " + std::to_string(world_));
    }
  }

  // O1 under DDP equals one process running O1 on each rank's chunk.
  void o1_mlp_against_one_process() {
    constexpr int64_t kPerRank = 4;
    torch::manual_seed(7 + rank_);  // DDP copies rank 0's weights
    Mlp net(8, 32, 4);
    torch::optim::SGD optimizer(net->parameters(), 0.1);
    MixedPrecision mp(*net, optimizer, AmpOptions(OptLevel::kO1), group_);
    DistributedDataParallel model(net, group_);
    torch::manual_seed(7);
    Mlp reference(8, 32, 4);
    torch::optim::SGD reference_optimizer(reference->parameters(), 0.1);
    MixedPrecision reference_mp(*reference, reference_optimizer, AmpOptions(OptLevel::kO1));
    for (int step = 0; step < 3; ++step) {
      torch::manual_seed(70 + step);
      auto x = torch::randn({kPerRank * world_, 8}), y = torch::randn({kPerRank * world_, 4});
      mp.zero_grad();
      torch::mse_loss(mp.forward(model, mine(x, kPerRank)), mine(y, kPerRank)).backward();
      mp.step();
      reference_mp.zero_grad();
      for (int r = 0; r < world_; ++r) {
        auto out = reference_mp.forward(reference, x.narrow(0, r * kPerRank, kPerRank));
        (torch::mse_loss(out, y.narrow(0, r * kPerRank, kPerRank)) / world_).backward();
      }
      reference_mp.step();
    }
    // bfloat16 rounding of weights that differ in the last float32 bit
    // (gradients summed in another order) may differ: 1e-3, not 1e-5.
    const double error = worst_relative_error(net->parameters(), reference->parameters());
    record(amp_ddp_check::kO1Mlp, error <= 1e-3f, "max relative error " + std::to_string(error));
    record_same_on_every_rank(amp_ddp_check::kO1Replicas, net->parameters());
  }

  // The tutorial's set-up: ConvNet, SyncBatchNorm, O1 bfloat16, a scaler.
  void o1_conv_net_with_sync_batch_norm() {
    constexpr int64_t kPerRank = 3;
    torch::manual_seed(11 + rank_);
    ConvNet net;
    ddp::nn::convert_sync_batchnorm(net.ptr(), group_);
    torch::optim::SGD optimizer(net->parameters(), 0.01);
    MixedPrecision mp(*net, optimizer, AmpOptions(OptLevel::kO1), group_);
    DistributedDataParallel model(net, group_);
    GradScaler scaler({}, group_);
    torch::manual_seed(11);
    ConvNet reference;  // BatchNorm2d on the whole batch, O1 as well
    torch::optim::SGD reference_optimizer(reference->parameters(), 0.01);
    MixedPrecision reference_mp(*reference, reference_optimizer, AmpOptions(OptLevel::kO1));
    // What the job would do without SyncBatchNorm: each rank's BatchNorm
    // normalizes its own share, and the gradients are averaged.
    torch::manual_seed(11);
    ConvNet per_rank;
    torch::optim::SGD per_rank_optimizer(per_rank->parameters(), 0.01);
    MixedPrecision per_rank_mp(*per_rank, per_rank_optimizer, AmpOptions(OptLevel::kO1));
    float first_loss = 0, last_loss = 0;
    double output_error = 0, per_rank_output_error = 0;  // first step, this rank's share
    for (int step = 0; step < 4; ++step) {
      torch::manual_seed(110);  // one batch, memorized
      auto x = torch::randn({kPerRank * world_, 1, 28, 28});
      auto y = torch::randint(0, 10, {kPerRank * world_});
      mp.zero_grad();
      auto output = mp.forward(model, mine(x, kPerRank));
      auto loss = torch::cross_entropy_loss(output, mine(y, kPerRank));
      scaler.scale(loss).backward();
      mp.step(scaler);
      scaler.update();
      reference_mp.zero_grad();
      auto reference_output = reference_mp.forward(reference, x);
      auto reference_loss = torch::cross_entropy_loss(reference_output, y);
      reference_loss.backward();
      reference_mp.step();
      if (step == 0) first_loss = reference_loss.item<float>();
      last_loss = reference_loss.item<float>();
      per_rank_mp.zero_grad();
      for (int r = 0; r < world_; ++r) {
        auto share_output = per_rank_mp.forward(per_rank, x.narrow(0, r * kPerRank, kPerRank));
        (torch::cross_entropy_loss(share_output, y.narrow(0, r * kPerRank, kPerRank)) / world_)
            .backward();
        if (step == 0 && r == rank_) {
          per_rank_output_error = worst_relative_error({share_output.detach()},
                                                       {mine(reference_output.detach(), kPerRank)});
        }
      }
      per_rank_mp.step();
      if (step == 0) {
        output_error =
            worst_relative_error({output.detach()}, {mine(reference_output.detach(), kPerRank)});
      }
    }
    std::vector<torch::Tensor> parameters_and_statistics = net->parameters();
    for (const auto& b : net->buffers()) parameters_and_statistics.push_back(b);
    record_same_on_every_rank(check_name(amp_ddp_check::kO1ConvNet, amp_ddp_check::kReplicas),
                              parameters_and_statistics);
    record(check_name(amp_ddp_check::kO1ConvNet, amp_ddp_check::kNoOverflow),
           scaler.get_scale() == 65536.0, "scale " + std::to_string(scaler.get_scale()));
    // bfloat16 activations and their gradients round differently in
    // SyncBatchNorm and in BatchNorm, and the batch-norm biases (sums of
    // such gradients, starting at 0) stay small: differences within 1e-2 of
    // each parameter's magnitude, or of 0.05 when it is smaller. Measured:
    // 0.0050 here, 0.022 with plain (per-rank) BatchNorm instead of
    // SyncBatchNorm, which 2e-2 let through by a hair.
    const double error = worst_relative_error(net->parameters(), reference->parameters(), 0.05);
    record(amp_ddp_check::kO1ConvNetMatches, error <= 1e-2f,
           "max relative error " + std::to_string(error) + " > 1e-2");
    // The first step's output tells SyncBatchNorm from per-rank BatchNorm on
    // any machine: the same weights, so SyncBatchNorm gives exactly the rows
    // of the whole-batch output (measured: 0 on an AVX2 EPYC), per-rank
    // statistics do not (5.8e-2). The last step's loss did not: bfloat16
    // rounding over four steps moved it 1.0e-3 on that machine and 3.8e-4 on
    // another, while per-rank BatchNorm moved it only 2.8e-4.
    record(check_name(amp_ddp_check::kO1ConvNet, amp_ddp_check::kFirstOutput),
           output_error <= 1e-2f,
           "max relative error " + std::to_string(output_error) +
               " (per-rank BatchNorm: " + std::to_string(per_rank_output_error) + ")");
    record(amp_ddp_check::kO1ReferenceLearns, last_loss < first_loss,
           std::to_string(first_loss) + " -> " + std::to_string(last_loss));
  }

  // O2: masters aligned across ranks; an overflow on one rank skipped by all.
  void o2_conv_net() {
    constexpr int64_t kPerRank = 2;
    torch::manual_seed(13 + rank_);  // different on each rank on purpose
    ConvNet net;
    torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9));
    MixedPrecision mp(*net, optimizer, AmpOptions(OptLevel::kO2), group_);
    DistributedDataParallel model(net, group_);
    GradScaler scaler({}, group_);
    for (int step = 0; step < 3; ++step) {
      torch::manual_seed(130 + step);
      auto x = torch::randn({kPerRank * world_, 1, 28, 28});
      auto y = torch::randint(0, 10, {kPerRank * world_});
      mp.zero_grad();
      auto loss =
          torch::cross_entropy_loss(mp.forward(model, mine(x, kPerRank)), mine(y, kPerRank));
      scaler.scale(loss).backward();
      std::vector<torch::Tensor> masters_before;
      for (auto& item : mp.master_weights()) masters_before.push_back(item.second.detach().clone());
      auto model_before = snapshot_of(net->parameters());
      if (step == 1 && rank_ == world_ - 1) {  // after DDP's reduction: this rank only
        net->fc->weight.mutable_grad().view(-1)[5] = std::numeric_limits<float>::infinity();
      }
      const bool stepped = mp.step(scaler);
      scaler.update();
      if (step == 1) {
        std::vector<torch::Tensor> masters_after;
        for (auto& item : mp.master_weights()) masters_after.push_back(item.second);
        record(check_name(amp_ddp_check::kO2, amp_ddp_check::kInfSkippedEverywhere),
               !stepped && all_equal(masters_after, masters_before) &&
                   all_equal(net->parameters(), model_before),
               std::string("step() returned ") + (stepped ? "true" : "false") +
                   "; masters: " + first_difference(masters_after, masters_before) +
                   "; model: " + first_difference(net->parameters(), model_before));
        record(check_name(amp_ddp_check::kO2, amp_ddp_check::kScaleHalvesEverywhere),
               scaler.get_scale() == 32768.0, "scale " + std::to_string(scaler.get_scale()));
      }
    }
    std::vector<torch::Tensor> masters;
    for (auto& item : mp.master_weights()) masters.push_back(item.second);
    record_same_on_every_rank(check_name(amp_ddp_check::kO2, amp_ddp_check::kMastersEverywhere),
                              masters);
    // (Buffers differ: plain BatchNorm's running statistics follow each
    // rank's last batch, as in PyTorch.)
    record_same_on_every_rank(check_name(amp_ddp_check::kO2, amp_ddp_check::kParametersEverywhere),
                              net->parameters());
    const auto rounded = mp.master_weights().at("amp.master/fc.weight").to(torch::kBFloat16);
    record(check_name(amp_ddp_check::kO2, amp_ddp_check::kRoundedMasters),
           torch::equal(net->fc->weight, rounded),
           "fc.weight: " + first_difference({net->fc->weight}, {rounded}));
  }

  void o3_mlp() {
    torch::manual_seed(17 + rank_);
    Mlp net(8, 16, 4);
    torch::optim::SGD optimizer(net->parameters(), 0.1);
    MixedPrecision mp(*net, optimizer, AmpOptions(OptLevel::kO3), group_);
    DistributedDataParallel model(net, group_);
    GradScaler scaler({}, group_);
    for (int step = 0; step < 3; ++step) {
      torch::manual_seed(170 + step);
      auto x = torch::randn({2 * world_, 8}), y = torch::randn({2 * world_, 4});
      mp.zero_grad();
      scaler.scale(torch::mse_loss(mp.forward(model, mine(x, 2)), mine(y, 2))).backward();
      mp.step(scaler);
      scaler.update();
    }
    std::string not_bf16;
    for (auto& item : net->named_parameters()) {
      if (item.value().scalar_type() != torch::kBFloat16 && not_bf16.empty()) {
        not_bf16 = item.key() + " is " + std::string(c10::toString(item.value().scalar_type()));
      }
    }
    record(check_name(amp_ddp_check::kO3, amp_ddp_check::kBFloat16Parameters), not_bf16.empty(),
           not_bf16);
    record_same_on_every_rank(check_name(amp_ddp_check::kO3, amp_ddp_check::kReplicasIdentical),
                              net->parameters());
  }

 private:
  std::shared_ptr<ProcessGroup> group_;
  int rank_, world_;
  NamedChecks checks_;
};

}  // namespace

int check_scaler_overflow(const std::shared_ptr<ProcessGroup>& group) {
  Checker checker(group);
  checker.scaler_overflow();
  return checker.failed();
}

int check_amp_with_ddp(const std::shared_ptr<ProcessGroup>& group) {
  Checker checker(group);
  checker.o1_mlp_against_one_process();
  checker.o1_conv_net_with_sync_batch_norm();
  checker.o2_conv_net();
  checker.o3_mlp();
  return checker.failed();
}

}  // namespace ddp::testing

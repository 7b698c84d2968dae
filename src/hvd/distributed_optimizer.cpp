#include "ddp/hvd/distributed_optimizer.hpp"

#include <torch/torch.h>

#include <string>
#include <vector>

#include "base/str.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/broadcast_tensors.hpp"
#include "ddp/hvd/runtime.hpp"
#include "hvd/gradient_fusion.hpp"

namespace ddp::hvd {
namespace {

void validate(const DistributedOptimizerOptions& options) {
  if (options.op() != ReduceOp::kAverage && options.op() != ReduceOp::kSum) {
    throw ConfigError(std::string("hvd::DistributedOptimizer: op is ") + to_string(options.op()) +
                      "; gradients can only be averaged (ReduceOp::kAverage, Horovod's "
                      "hvd.Average) or summed (ReduceOp::kSum).");
  }
  if (options.fusion_threshold_bytes() < 0) {
    throw ConfigError(base::detail::str(
        "hvd::DistributedOptimizer: fusion_threshold_bytes is ", options.fusion_threshold_bytes(),
        " bytes; use a size such as 64 MiB (the default), or 0 to disable fusion."));
  }
  if (options.backward_passes_per_step() < 1) {
    throw ConfigError(
        base::detail::str("hvd::DistributedOptimizer: backward_passes_per_step is ",
                          options.backward_passes_per_step(),
                          "; it must be at least 1 (the number of backward passes per step())."));
  }
}

}  // namespace

DistributedOptimizer::DistributedOptimizer(std::shared_ptr<torch::optim::Optimizer> optimizer,
                                           DistributedOptimizerOptions options)
    : optimizer_(std::move(optimizer)), options_(std::move(options)) {
  if (!optimizer_) {
    throw ConfigError(
        "hvd::DistributedOptimizer: the optimizer is null; pass the optimizer "
        "to wrap, e.g. std::make_shared<torch::optim::SGD>(...).");
  }
  validate(options_);
  options_.process_group(
      detail::group_or_default(options_.process_group(), "hvd::DistributedOptimizer"));
  std::vector<at::Tensor> trainable;
  for (const auto& group : optimizer_->param_groups()) {
    for (const auto& parameter : group.params()) {
      if (parameter.requires_grad()) trainable.push_back(parameter);
    }
  }
  fusion_ = std::make_shared<detail::GradientFusion>(std::move(trainable), options_.process_group(),
                                                     options_);
  fusion_->attach_hooks();
  fusion_->set_step_start([this] {
    Join* join = active_join();
    if (join == nullptr) return 1.0;
    const JoinRound round = join->notify(*this, /*sync=*/true);
    const bool by_contributors =
        options_.op() == ReduceOp::kAverage && !join->options().divide_by_initial_world_size();
    return by_contributors ? static_cast<double>(round.world) / round.active : 1.0;
  });
}

void DistributedOptimizer::join_shadow(const JoinRound& round) {
  if (round.sync) fusion_->shadow_step();
}

void DistributedOptimizer::join_finish(int source) {
  std::vector<at::Tensor> parameters;
  for (const auto& group : optimizer_->param_groups()) {
    for (const auto& parameter : group.params()) parameters.push_back(parameter);
  }
  torch::NoGradGuard no_grad;
  broadcast_tensors(*options_.process_group(), parameters, source);
}

DistributedOptimizer::~DistributedOptimizer() = default;

void DistributedOptimizer::synchronize() {
  fusion_->synchronize();
  synchronized_ = true;
}

void DistributedOptimizer::step() {
  if (!synchronized_) fusion_->synchronize();
  synchronized_ = false;
  optimizer_->step();
}

void DistributedOptimizer::zero_grad() { optimizer_->zero_grad(); }

DistributedOptimizerStats DistributedOptimizer::stats() const { return fusion_->stats(); }

}  // namespace ddp::hvd

#include "ddp/nn/sync_batch_norm.hpp"

#include <torch/torch.h>

#include <sstream>

#include "base/str.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"
#include "nn/sync_batch_norm_function.hpp"

namespace ddp::nn {

SyncBatchNormImpl::SyncBatchNormImpl(SyncBatchNormOptions options_,
                                     std::shared_ptr<ProcessGroup> group_)
    : options(std::move(options_)), group(std::move(group_)) {
  validate();
  reset();
}

SyncBatchNormImpl::SyncBatchNormImpl(SyncBatchNormOptions options_,
                                     std::shared_ptr<ProcessGroup> group_,
                                     const at::Tensor& weight_, const at::Tensor& bias_,
                                     const at::Tensor& running_mean_,
                                     const at::Tensor& running_var_,
                                     const at::Tensor& num_batches_tracked_)
    : options(std::move(options_)), group(std::move(group_)) {
  validate();
  register_tensors(weight_, bias_, running_mean_, running_var_, num_batches_tracked_);
}

void SyncBatchNormImpl::validate() const {
  if (!group) {
    throw ConfigError(
        "SyncBatchNorm: the process group is null; pass the group returned by "
        "ddp::init()");
  }
  if (options.num_features() < 1) {
    throw ConfigError(base::detail::str("SyncBatchNorm: num_features is ", options.num_features(),
                                        "; it must be the (positive) number of channels"));
  }
  if (!(options.eps() > 0)) {
    throw ConfigError(base::detail::str("SyncBatchNorm: eps is ", options.eps(),
                                        "; it must be positive (BatchNorm uses 1e-5)"));
  }
  if (options.momentum() && !(*options.momentum() >= 0 && *options.momentum() <= 1)) {
    throw ConfigError(
        base::detail::str("SyncBatchNorm: momentum is ", *options.momentum(),
                          "; it must lie in [0, 1], or be nullopt for a cumulative average"));
  }
}

void SyncBatchNormImpl::register_tensors(const at::Tensor& weight_, const at::Tensor& bias_,
                                         const at::Tensor& running_mean_,
                                         const at::Tensor& running_var_,
                                         const at::Tensor& num_batches_tracked_) {
  // Same names, and the same undefined entries when not affine or not
  // tracking, as BatchNorm: snapshots and state dicts carry over.
  weight = register_parameter("weight", weight_, weight_.defined() && weight_.requires_grad());
  bias = register_parameter("bias", bias_, bias_.defined() && bias_.requires_grad());
  running_mean = register_buffer("running_mean", running_mean_);
  running_var = register_buffer("running_var", running_var_);
  num_batches_tracked = register_buffer("num_batches_tracked", num_batches_tracked_);
}

void SyncBatchNormImpl::reset() {
  const int64_t c = options.num_features();
  at::Tensor w, b, mean, var, batches;
  if (options.affine()) {
    w = torch::ones({c}).requires_grad_();
    b = torch::zeros({c}).requires_grad_();
  }
  if (options.track_running_stats()) {
    mean = torch::zeros({c});
    var = torch::ones({c});
    batches = torch::zeros({}, torch::kLong);
  }
  register_tensors(w, b, mean, var, batches);
}

void SyncBatchNormImpl::reset_running_stats() {
  if (!options.track_running_stats()) return;
  torch::NoGradGuard no_grad;
  running_mean.zero_();
  running_var.fill_(1);
  num_batches_tracked.zero_();
}

void SyncBatchNormImpl::reset_parameters() {
  reset_running_stats();
  if (!options.affine()) return;
  torch::NoGradGuard no_grad;
  weight.fill_(1);
  bias.zero_();
}

void SyncBatchNormImpl::pretty_print(std::ostream& stream) const {
  stream << "ddp::nn::SyncBatchNorm(" << options.num_features() << ", eps=" << options.eps()
         << ", momentum=";
  if (options.momentum()) {
    stream << *options.momentum();
  } else {
    stream << "None";
  }
  stream << ", affine=" << (options.affine() ? "true" : "false")
         << ", track_running_stats=" << (options.track_running_stats() ? "true" : "false")
         << ", world_size=" << group->size() << ")";
}

at::Tensor SyncBatchNormImpl::forward(const at::Tensor& input) {
  if (input.dim() < 2 || input.dim() > 5) {
    std::ostringstream shape;
    shape << input.sizes();
    throw InvalidArgumentError(
        base::detail::str("SyncBatchNorm: expected an input of 2 to 5 dimensions ((N, C), (N, C, "
                          "L), (N, C, H, W) or (N, C, D, H, W)), got ",
                          input.dim(), " dimensions ", shape.str()));
  }
  if (input.size(1) != options.num_features()) {
    throw InvalidArgumentError(base::detail::str(
        "SyncBatchNorm: the input has ", input.size(1),
        " channels (dimension 1) but the layer was built for ", options.num_features()));
  }
  if (!is_training()) {
    // Running statistics, or (when not tracking) this rank's own batch
    // statistics, as PyTorch's SyncBatchNorm: no communication in eval.
    return torch::batch_norm(input, weight, bias, running_mean, running_var,
                             /*training=*/!options.track_running_stats(), 0.0, options.eps(),
                             at::globalContext().userEnabledCuDNN());
  }
  double average_factor = 0.0;
  if (options.track_running_stats()) {
    torch::NoGradGuard no_grad;
    num_batches_tracked.add_(1);
    average_factor =
        options.momentum() ? *options.momentum() : 1.0 / num_batches_tracked.item<double>();
  }
  return detail::sync_batch_norm_training(input, weight, bias, running_mean, running_var,
                                          average_factor, options.eps(), group);
}

}  // namespace ddp::nn

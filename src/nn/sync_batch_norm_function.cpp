#include "nn/sync_batch_norm_function.hpp"

#include <torch/torch.h>

#include <sstream>
#include <string>
#include <vector>

#include "base/str.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"

namespace ddp::nn::detail {
namespace {

using torch::autograd::AutogradContext;
using torch::autograd::variable_list;

// Carries the process group from forward to backward through the context's
// saved data, which holds IValues only.
struct GroupCapsule : torch::CustomClassHolder {
  explicit GroupCapsule(std::shared_ptr<ProcessGroup> g) : group(std::move(g)) {}
  std::shared_ptr<ProcessGroup> group;
};

// Statistics and arithmetic run in float32 for 16-bit inputs (the output
// keeps the input's dtype), in the input's own type otherwise.
c10::ScalarType compute_type(const at::Tensor& input) {
  auto type = input.scalar_type();
  return type == at::kHalf || type == at::kBFloat16 ? at::kFloat : type;
}

// Every dimension but the channels (1).
std::vector<int64_t> reduce_dims(const at::Tensor& input) {
  std::vector<int64_t> dims{0};
  for (int64_t d = 2; d < input.dim(); ++d) dims.push_back(d);
  return dims;
}

// A per-channel vector shaped to broadcast against `input`: (1, C, 1, ...).
at::Tensor per_channel(const at::Tensor& values, const at::Tensor& input) {
  std::vector<int64_t> shape(input.dim(), 1);
  shape[1] = values.numel();
  return values.view(shape);
}

std::string shape_of(const at::Tensor& t) {
  std::ostringstream text;
  text << t.sizes();
  return text.str();
}

struct RunningStatistics {
  at::Tensor mean, var;
};

class SyncBatchNormFunction : public torch::autograd::Function<SyncBatchNormFunction> {
 public:
  // Optional tensors are passed as c10::optional, running statistics inside
  // a struct: autograd records every plain tensor argument as an input, and
  // an undefined one has no device to record.
  static variable_list forward(AutogradContext* ctx, const at::Tensor& input,
                               const c10::optional<at::Tensor>& weight_arg,
                               const c10::optional<at::Tensor>& bias_arg,
                               const RunningStatistics& running, double average_factor, double eps,
                               const std::shared_ptr<ProcessGroup>& group) {
    const at::Tensor weight = weight_arg.value_or(at::Tensor());
    const at::Tensor bias = bias_arg.value_or(at::Tensor());
    const at::Tensor& running_mean = running.mean;
    const at::Tensor& running_var = running.var;
    const int64_t channels = input.size(1);
    const auto dims = reduce_dims(input);
    const auto compute = compute_type(input);
    const at::Tensor x = input.to(compute);
    // Note [Synchronized statistics]: one packed all-reduce of
    // [sum (C), sum of squares (C), count (1)] in float64.
    at::Tensor stats = at::empty({2 * channels + 1}, input.options().dtype(at::kDouble));
    stats.narrow(0, 0, channels).copy_(at::sum(x, dims, false, at::kDouble));
    stats.narrow(0, channels, channels).copy_(at::sum(x.square(), dims, false, at::kDouble));
    stats.narrow(0, 2 * channels, 1).fill_(channels > 0 ? double(input.numel() / channels) : 0.0);
    group->all_reduce(stats, ReduceOp::kSum);
    const double count = stats[2 * channels].item<double>();
    if (count <= 1) {
      throw InvalidArgumentError(
          base::detail::str("SyncBatchNorm: expected more than 1 value per channel over all ranks "
                            "when training, got ",
                            static_cast<int64_t>(count), " (this rank's input is ", shape_of(input),
                            "); use larger batches, or eval mode"));
    }
    const at::Tensor mean = stats.narrow(0, 0, channels) / count;
    const at::Tensor variance =
        (stats.narrow(0, channels, channels) / count - mean * mean).clamp_min(0);
    if (running_mean.defined()) {
      running_mean.copy_(running_mean.to(at::kDouble) * (1 - average_factor) +
                         mean * average_factor);
    }
    if (running_var.defined()) {
      const at::Tensor unbiased = variance * (count / (count - 1));
      running_var.copy_(running_var.to(at::kDouble) * (1 - average_factor) +
                        unbiased * average_factor);
    }
    const at::Tensor mean_c = mean.to(compute);
    const at::Tensor invstd_c = (variance + eps).rsqrt().to(compute);
    const at::Tensor scale = weight.defined() ? invstd_c * weight.to(compute) : invstd_c;
    at::Tensor output = (x - per_channel(mean_c, input)) * per_channel(scale, input);
    if (bias.defined()) output.add_(per_channel(bias.to(compute), input));

    ctx->save_for_backward({input, weight, mean_c, invstd_c});
    ctx->saved_data["count"] = count;
    ctx->saved_data["has_bias"] = bias.defined();
    ctx->saved_data["group"] = c10::IValue::make_capsule(c10::make_intrusive<GroupCapsule>(group));
    return {output.to(input.scalar_type())};
  }

  static variable_list backward(AutogradContext* ctx, variable_list grad_outputs) {
    const auto saved = ctx->get_saved_variables();
    const at::Tensor &input = saved[0], &weight = saved[1], &mean = saved[2], &invstd = saved[3];
    const auto compute = mean.scalar_type();
    const int64_t channels = input.size(1);
    const auto dims = reduce_dims(input);
    const at::Tensor dy = grad_outputs[0].to(compute);
    const at::Tensor xmu = input.to(compute) - per_channel(mean, input);
    const at::Tensor sum_dy = at::sum(dy, dims, false, at::kDouble);
    const at::Tensor sum_dy_xmu = at::sum(dy * xmu, dims, false, at::kDouble);

    at::Tensor grad_input, grad_weight, grad_bias;
    if (ctx->needs_input_grad(0)) {
      // The input gradient needs the global sums; weight and bias keep
      // this rank's share (Note [Synchronized statistics]).
      at::Tensor global = at::cat({sum_dy, sum_dy_xmu});
      auto group =
          c10::static_intrusive_pointer_cast<GroupCapsule>(ctx->saved_data["group"].toCapsule())
              ->group;
      group->all_reduce(global, ReduceOp::kSum);
      const double count = ctx->saved_data["count"].toDouble();
      const at::Tensor mean_dy = (global.narrow(0, 0, channels) / count).to(compute);
      const at::Tensor mean_dy_xmu = (global.narrow(0, channels, channels) / count).to(compute);
      const at::Tensor scale = weight.defined() ? invstd * weight.to(compute) : invstd;
      grad_input = (dy - per_channel(mean_dy, input) -
                    xmu * per_channel(invstd * invstd * mean_dy_xmu, input)) *
                   per_channel(scale, input);
      grad_input = grad_input.to(input.scalar_type());
    }
    if (weight.defined() && ctx->needs_input_grad(1)) {
      grad_weight = (sum_dy_xmu * invstd.to(at::kDouble)).to(weight.scalar_type());
    }
    // Autograd numbers only the tensors passed: bias is edge 2 after a
    // weight, edge 1 without one.
    if (ctx->saved_data["has_bias"].toBool() && ctx->needs_input_grad(weight.defined() ? 2 : 1)) {
      grad_bias = sum_dy.to(weight.defined() ? weight.scalar_type() : compute);
    }
    // One entry per forward argument; none for the non-tensor ones.
    return {grad_input,   grad_weight,  grad_bias,   at::Tensor(),
            at::Tensor(), at::Tensor(), at::Tensor()};
  }
};

}  // namespace

at::Tensor sync_batch_norm_training(const at::Tensor& input, const at::Tensor& weight,
                                    const at::Tensor& bias, const at::Tensor& running_mean,
                                    const at::Tensor& running_var, double average_factor,
                                    double eps, const std::shared_ptr<ProcessGroup>& group) {
  auto optional = [](const at::Tensor& t) {
    return t.defined() ? c10::optional<at::Tensor>(t) : c10::nullopt;
  };
  return SyncBatchNormFunction::apply(input, optional(weight), optional(bias),
                                      RunningStatistics{running_mean, running_var}, average_factor,
                                      eps, group)[0];
}

}  // namespace ddp::nn::detail

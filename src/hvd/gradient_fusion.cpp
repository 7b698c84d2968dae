#include "hvd/gradient_fusion.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <string>

#include "base/scope_exit.hpp"
#include "base/str.hpp"
#include "comm/collective_name.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"

namespace ddp::hvd::detail {
namespace {

using ddp::base::detail::ScopeExit;
using ddp::parallel::detail::Bucket;
using ddp::parallel::detail::BucketSettings;
using ddp::parallel::detail::CapRule;

// Note [Fusion buffers]
// Gradients are grouped, in the order they are expected to become ready
// (the reverse of registration: the last layer first), by dtype and device;
// a buffer takes the next gradient while it stays within the threshold
// (CapRule::kNeverExceed), so a gradient larger than the threshold travels
// alone, and a threshold of 0 gives one buffer per gradient. Horovod fuses
// dynamically whatever is ready within a cycle; fixed buffers give the same
// few large collectives with an order every rank knows without negotiating.
BucketSettings fusion_settings(const DistributedOptimizerOptions& options) {
  BucketSettings settings;
  settings.first_cap_bytes = options.fusion_threshold_bytes();
  settings.cap_bytes = options.fusion_threshold_bytes();
  settings.cap_rule = CapRule::kNeverExceed;
  if (options.compression() == Compression::kFp16) {
    settings.wire_type = [](at::ScalarType dtype) {
      return dtype == at::kFloat || dtype == at::kDouble ? at::kHalf : dtype;
    };
  }
  settings.passes_per_step = options.backward_passes_per_step();
  return settings;
}

}  // namespace

GradientFusion::GradientFusion(std::vector<at::Tensor> parameters,
                               std::shared_ptr<ProcessGroup> group,
                               const DistributedOptimizerOptions& options)
    : group_(std::move(group)),
      options_(options),
      buffers_(std::move(parameters), fusion_settings(options_)) {
  stats_.buffer_bytes = buffers_.bucket_bytes();
}

void GradientFusion::attach_hooks() {
  std::weak_ptr<GradientFusion> weak = weak_from_this();
  buffers_.attach_hooks([weak](size_t index) {
    if (auto self = weak.lock()) self->on_gradient_accumulated(index);
  });
}

DistributedOptimizerStats GradientFusion::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void GradientFusion::set_step_start(std::function<double()> step_start) {
  std::lock_guard<std::mutex> lock(mutex_);
  step_start_ = std::move(step_start);
}

void GradientFusion::start_step() {
  if (step_started_) return;
  step_started_ = true;
  join_scale_ = step_start_ ? step_start_() : 1.0;
}

void GradientFusion::reset_step() {
  buffers_.reset();
  launched_during_backward_ = 0;
  step_started_ = false;
  join_scale_ = 1.0;
}

void GradientFusion::shadow_step() {
  std::lock_guard<std::mutex> lock(mutex_);
  ScopeExit reset_at_exit([this] { reset_step(); });
  for (Bucket& buffer : buffers_.buckets()) buffer.flat.zero_();
  buffers_.launch_rest([this](size_t b) { return issue(b); });
  for (Bucket& buffer : buffers_.buckets()) buffer.work.wait();
}

void GradientFusion::on_gradient_accumulated(size_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (buffers_.passes_left(index) == 0) {
    const int64_t k = options_.backward_passes_per_step();
    throw InvalidArgumentError(
        base::detail::str("hvd::DistributedOptimizer: the gradient of parameter #", index,
                          " (shape ", buffers_.parameters()[index].sizes(),
                          ") was computed more than backward_passes_per_step = ", k,
                          " time(s) before step(). Call step() after every ", k,
                          " backward pass(es), or set backward_passes_per_step to the number of "
                          "backward passes per step."));
  }
  start_step();
  if (!buffers_.count_pass(index)) return;
  // Every rank issues the buffers' collectives in the same order, whatever
  // order its gradients arrive in.
  if (buffers_.mark_ready(index)) {
    launched_during_backward_ += static_cast<int64_t>(
        buffers_.launch_ready_in_order([this](size_t b) { return launch(b); }));
  }
}

Work GradientFusion::launch(size_t buffer_index) {
  Bucket& buffer = buffers_.buckets()[buffer_index];
  const auto& parameters = buffers_.parameters();
  at::NoGradGuard no_grad;
  const bool average = options_.op() == ReduceOp::kAverage;
  for (size_t index : buffer.members) {
    at::Tensor slice = buffers_.slice(index);
    const at::Tensor& grad = parameters[index].grad();
    if (!grad.defined()) {
      slice.zero_();
    } else if (average && grad.scalar_type() != buffer.flat.scalar_type()) {
      // Compressed: divide before the cast so that the float16 sum stays
      // in range.
      slice.copy_(grad.reshape({-1}).div(group_->size()));
    } else {
      slice.copy_(grad.reshape({-1}));
    }
  }
  return issue(buffer_index);
}

// The all-reduce of one packed buffer (a joined rank's holds zeros).
Work GradientFusion::issue(size_t buffer_index) {
  Bucket& buffer = buffers_.buckets()[buffer_index];
  const bool average = options_.op() == ReduceOp::kAverage;
  const bool compressed =
      buffer.flat.scalar_type() != buffers_.parameters()[buffer.members.front()].scalar_type();
  const ReduceOp op = average && !compressed ? ReduceOp::kAverage : ReduceOp::kSum;
  ddp::comm::detail::CollectiveName name(
      options_.fusion_threshold_bytes() > 0 ? "hvd.fusion_buffer" : "hvd.allreduce",
      static_cast<int64_t>(buffer_index));
  return group_->all_reduce_async(buffer.flat, op);
}

void GradientFusion::unpack(const Bucket& buffer) {
  const int64_t k = options_.backward_passes_per_step();
  const bool divide = options_.average_aggregated_gradients() && k > 1;
  const auto& parameters = buffers_.parameters();
  for (size_t index : buffer.members) {
    const at::Tensor& parameter = parameters[index];
    at::Tensor value = buffers_.slice(index).view(parameter.sizes());
    at::Tensor& grad = parameter.mutable_grad();
    if (grad.defined()) {
      grad.copy_(value);
    } else {
      grad = value.to(parameter.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
    }
    if (divide) grad.div_(k);
  }
}

void GradientFusion::synchronize() {
  std::lock_guard<std::mutex> lock(mutex_);
  ScopeExit reset_at_exit([this] { reset_step(); });
  start_step();
  buffers_.launch_rest([this](size_t b) { return launch(b); });
  at::NoGradGuard no_grad;
  for (Bucket& buffer : buffers_.buckets()) {
    buffer.work.wait();
    if (join_scale_ != 1.0) buffer.flat.mul_(join_scale_);  // Note [Joining]
    unpack(buffer);
  }
  stats_.launched_during_backward = launched_during_backward_;
  ++stats_.synchronizations;
}

}  // namespace ddp::hvd::detail

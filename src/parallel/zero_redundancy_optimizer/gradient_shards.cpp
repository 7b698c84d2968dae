#include "parallel/zero_redundancy_optimizer/gradient_shards.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <string>
#include <utility>

#include "base/scope_exit.hpp"
#include "base/str.hpp"
#include "comm/collective_name.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"

namespace ddp::parallel::detail {

GradientShards::GradientShards(std::vector<at::Tensor> parameters, BucketSettings settings,
                               std::shared_ptr<ProcessGroup> group)
    : group_(std::move(group)),
      passes_per_step_(settings.passes_per_step),
      buckets_(std::move(parameters), std::move(settings)),
      received_(buckets_.parameters().size(), 0) {
  const int64_t world = group_->size();
  for (Bucket& bucket : buckets_.buckets()) {
    const int64_t chunk = (bucket.flat.numel() + world - 1) / world;
    grad_chunks_.push_back(at::zeros({chunk}, bucket.flat.options()));
    bucket.flat = at::Tensor();  // Allocated at launch, released by step().
  }
  divisor_ = static_cast<double>(world);
}

void GradientShards::attach_hooks() {
  std::weak_ptr<GradientShards> weak = weak_from_this();
  buckets_.attach_hooks([weak](size_t index) {
    if (auto self = weak.lock()) self->on_gradient_accumulated(index);
  });
}

void GradientShards::set_step_start(std::function<double()> step_start) {
  std::lock_guard<std::mutex> lock(mutex_);
  step_start_ = std::move(step_start);
}

bool GradientShards::launched() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return std::any_of(buckets_.buckets().begin(), buckets_.buckets().end(),
                     [](const Bucket& bucket) { return bucket.flat.defined(); });
}

void GradientShards::on_gradient_accumulated(size_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (buckets_.passes_left(index) == 0) {
    const at::Tensor& parameter = buckets_.parameters()[index];
    throw InvalidArgumentError(base::detail::str(
        "ZeroRedundancyOptimizer (stage 2): the gradient of parameter #", index, " (shape ",
        parameter.sizes(), ") was computed more than backward_passes_per_step = ", passes_per_step_,
        " time(s) before step(), and its bucket was already reduce-scattered. Call step() after "
        "every ",
        passes_per_step_,
        " backward pass(es), or set backward_passes_per_step to the passes per step."));
  }
  if (!buckets_.count_pass(index)) return;  // Earlier passes accumulate in .grad.
  if (buckets_.mark_ready(index)) {
    buckets_.launch_ready_in_order([this](size_t b) {
      start_step();
      return launch(b, /*contribute=*/true);
    });
  }
}

void GradientShards::start_step() {
  if (step_started_) return;
  step_started_ = true;
  divisor_ = step_start_ ? step_start_() : static_cast<double>(group_->size());
}

// Packs bucket `b` (this rank's gradients, or zeros on a joined rank) into
// a flat buffer of world x chunk elements, releasing the gradients, and
// starts its reduce-scatter into this rank's chunk.
Work GradientShards::launch(size_t b, bool contribute) {
  Bucket& bucket = buckets_.buckets()[b];
  const auto& parameters = buckets_.parameters();
  at::NoGradGuard no_grad;
  const at::Tensor& first = parameters[bucket.members.front()];
  const int64_t used = bucket.offsets.back() + parameters[bucket.members.back()].numel();
  bucket.flat =
      at::empty({group_->size() * grad_chunks_[b].numel()}, first.options().requires_grad(false));
  bucket.flat.narrow(0, used, bucket.flat.numel() - used).zero_();  // The padding.
  for (size_t index : bucket.members) {
    at::Tensor slice = buckets_.slice(index);
    at::Tensor& grad = parameters[index].mutable_grad();
    if (!contribute || !grad.defined()) {
      slice.zero_();
      continue;
    }
    slice.copy_(grad.reshape({-1}));
    received_[index] = 1;
    grad.reset();
  }
  comm::detail::CollectiveName name("zero.reduce_scatter", static_cast<int64_t>(b));
  return group_->reduce_scatter_async(grad_chunks_[b], bucket.flat, ReduceOp::kSum);
}

std::vector<int32_t> GradientShards::synchronize() {
  std::lock_guard<std::mutex> lock(mutex_);
  start_step();
  return finish(/*contribute=*/true);
}

std::vector<int32_t> GradientShards::shadow(double divisor) {
  std::lock_guard<std::mutex> lock(mutex_);
  step_started_ = true;
  divisor_ = divisor;
  return finish(/*contribute=*/false);
}

std::vector<int32_t> GradientShards::finish(bool contribute) {
  // Also releases the flat buffers.
  base::detail::ScopeExit reset_at_exit([this] { reset_step(); });
  buckets_.launch_rest([this, contribute](size_t b) { return launch(b, contribute); });
  at::NoGradGuard no_grad;
  for (size_t b = 0; b < buckets_.buckets().size(); ++b) {
    buckets_.buckets()[b].work.wait();
    grad_chunks_[b].div_(divisor_);
  }
  // Which parameters got a gradient on any rank (the others' pieces get
  // none, so the optimizer skips them as it would skip the parameter).
  std::vector<int32_t> used = received_;
  if (!contribute) std::fill(used.begin(), used.end(), 0);
  // Alone, this rank's answer is everyone's; elsewhere the answer must come
  // back to the host, one wait for the GPU per step (as with DDP's
  // find_unused_parameters).
  if (group_->size() == 1) return used;
  const at::Device device = buckets_.parameters().front().device();
  at::Tensor flags = at::tensor(used, at::kInt).to(device);
  {
    comm::detail::CollectiveName name("zero.gradients_used");
    group_->all_reduce(flags, ReduceOp::kMax);
  }
  flags = flags.cpu();
  std::copy_n(flags.data_ptr<int32_t>(), used.size(), used.begin());
  return used;
}

void GradientShards::reset_step() {
  buckets_.reset();
  for (Bucket& bucket : buckets_.buckets()) bucket.flat = at::Tensor();
  std::fill(received_.begin(), received_.end(), 0);
  step_started_ = false;
  divisor_ = static_cast<double>(group_->size());
}

}  // namespace ddp::parallel::detail

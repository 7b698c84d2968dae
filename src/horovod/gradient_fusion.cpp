#include "horovod/gradient_fusion.hpp"

#include <ATen/ATen.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <map>
#include <string>

#include "compat/torch_compat.hpp"
#include "ddp/errors.hpp"
#include "horovod/timeline_recorder.hpp"

namespace ddp::hvd::detail {
namespace {

// Note [Fusion buffers]
// Gradients are grouped, in the order they are expected to become ready
// (the reverse of registration: the last layer first), by dtype and device;
// a buffer takes the next gradient while it stays within the threshold, so
// a gradient larger than the threshold travels alone, and a threshold of 0
// gives one buffer per gradient. Horovod fuses dynamically whatever is ready
// within a cycle; fixed buffers give the same few large collectives with
// an order every rank knows without negotiating.
std::vector<std::vector<size_t>> assignBuffers(const std::vector<at::Tensor>& parameters,
                                               const std::vector<int64_t>& wire_bytes,
                                               int64_t threshold) {
  struct Open {
    std::vector<size_t> members;
    int64_t bytes = 0;
  };
  std::map<std::pair<int, std::string>, Open> open;
  std::vector<std::vector<size_t>> closed;
  for (size_t k = parameters.size(); k-- > 0;) {
    const at::Tensor& p = parameters[k];
    Open& buffer = open[{static_cast<int>(p.scalar_type()), p.device().str()}];
    if (!buffer.members.empty() && buffer.bytes + wire_bytes[k] > threshold) {
      closed.push_back(std::move(buffer.members));
      buffer = Open{};
    }
    buffer.members.push_back(k);
    buffer.bytes += wire_bytes[k];
  }
  for (auto& entry : open) {
    if (!entry.second.members.empty()) closed.push_back(std::move(entry.second.members));
  }
  // Launch order: the buffer whose first gradient is expected first.
  std::sort(closed.begin(), closed.end(),
            [](const auto& a, const auto& b) { return a.front() > b.front(); });
  return closed;
}

}  // namespace

GradientFusion::GradientFusion(std::vector<at::Tensor> parameters,
                               std::shared_ptr<ProcessGroup> group,
                               const DistributedOptimizerOptions& options)
    : parameters_(std::move(parameters)), group_(std::move(group)), options_(options) {
  std::vector<int64_t> wire_bytes;
  for (const auto& p : parameters_) {
    wire_bytes.push_back(p.numel() * static_cast<int64_t>(c10::elementSize(wireType(p.scalar_type()))));
  }
  auto groups = assignBuffers(parameters_, wire_bytes, options_.fusion_threshold());
  buffer_of_.assign(parameters_.size(), 0);
  for (size_t b = 0; b < groups.size(); ++b) {
    FusionBuffer buffer;
    buffer.members = std::move(groups[b]);
    int64_t total = 0;
    for (size_t index : buffer.members) {
      buffer.offsets.push_back(total);
      buffer_of_[index] = b;
      total += parameters_[index].numel();
    }
    const at::Tensor& first = parameters_[buffer.members.front()];
    buffer.flat = at::zeros({total}, first.options()
                                         .dtype(wireType(first.scalar_type()))
                                         .requires_grad(false));
    stats_.buffer_bytes.push_back(total * static_cast<int64_t>(buffer.flat.element_size()));
    buffers_.push_back(std::move(buffer));
  }
  resetStep();
}

at::ScalarType GradientFusion::wireType(at::ScalarType dtype) const {
  const bool compressible = dtype == at::kFloat || dtype == at::kDouble;
  return options_.compression() == Compression::kFp16 && compressible ? at::kHalf : dtype;
}

void GradientFusion::attachHooks() {
  std::weak_ptr<GradientFusion> weak = weak_from_this();
  for (size_t i = 0; i < parameters_.size(); ++i) {
    accumulators_.push_back(compat::addPostAccumulateGradHook(parameters_[i], [weak, i] {
      if (auto self = weak.lock()) self->onGradientAccumulated(i);
    }));
  }
}

DistributedOptimizerStats GradientFusion::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void GradientFusion::resetStep() {
  passes_left_.assign(parameters_.size(), options_.backward_passes_per_step());
  next_to_launch_ = 0;
  launched_during_backward_ = 0;
  for (auto& buffer : buffers_) {
    buffer.pending = buffer.members.size();
    buffer.work = Work();
  }
}

void GradientFusion::onGradientAccumulated(size_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (passes_left_[index] == 0) {
    const int64_t k = options_.backward_passes_per_step();
    throw InvalidArgumentError(
        "hvd::DistributedOptimizer: the gradient of parameter #" + std::to_string(index) +
        " (shape " + c10::str(parameters_[index].sizes()) + ") was computed more than "
        "backward_passes_per_step = " + std::to_string(k) + " time(s) before step(). Call "
        "step() after every " + std::to_string(k) + " backward pass(es), or set "
        "backward_passes_per_step to the number of backward passes per step.");
  }
  if (--passes_left_[index] > 0) return;
  FusionBuffer& buffer = buffers_[buffer_of_[index]];
  if (--buffer.pending > 0) return;
  const size_t before = next_to_launch_;
  launchReadyInOrder();
  launched_during_backward_ += static_cast<int64_t>(next_to_launch_ - before);
}

// Every rank issues the buffers' collectives in the same order, whatever
// order its gradients arrive in.
void GradientFusion::launchReadyInOrder() {
  while (next_to_launch_ < buffers_.size() && buffers_[next_to_launch_].pending == 0) {
    launch(next_to_launch_++);
  }
}

void GradientFusion::launch(size_t buffer_index) {
  FusionBuffer& buffer = buffers_[buffer_index];
  torch::NoGradGuard no_grad;
  const bool average = options_.op() == ReduceOp::kAverage;
  for (size_t position = 0; position < buffer.members.size(); ++position) {
    const at::Tensor& parameter = parameters_[buffer.members[position]];
    at::Tensor slice = buffer.flat.narrow(0, buffer.offsets[position], parameter.numel());
    const at::Tensor& grad = parameter.grad();
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
  const bool compressed = buffer.flat.scalar_type() != parameters_[buffer.members.front()].scalar_type();
  const ReduceOp op = average && !compressed ? ReduceOp::kAverage : ReduceOp::kSum;
  timeline::detail::LabelScope name(
      options_.fusion_threshold() > 0 ? "hvd.fusion_buffer" : "hvd.allreduce",
      static_cast<int64_t>(buffer_index));
  buffer.work = group_->allReduceAsync(buffer.flat, op);
}

void GradientFusion::unpack(FusionBuffer& buffer) {
  const int64_t k = options_.backward_passes_per_step();
  const bool divide = options_.average_aggregated_gradients() && k > 1;
  for (size_t position = 0; position < buffer.members.size(); ++position) {
    const at::Tensor& parameter = parameters_[buffer.members[position]];
    at::Tensor value = buffer.flat.narrow(0, buffer.offsets[position], parameter.numel())
                           .view(parameter.sizes());
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
  struct ResetAtExit {
    GradientFusion* fusion;
    ~ResetAtExit() { fusion->resetStep(); }
  } reset_at_exit{this};
  while (next_to_launch_ < buffers_.size()) launch(next_to_launch_++);
  torch::NoGradGuard no_grad;
  for (auto& buffer : buffers_) {
    buffer.work.wait();
    unpack(buffer);
  }
  stats_.launched_during_backward = launched_during_backward_;
  ++stats_.synchronizations;
}

}  // namespace ddp::hvd::detail

#include "parallel/data_parallel/replica_set.hpp"

#include <ATen/ATen.h>
#include <ATen/ThreadLocalState.h>
#include <c10/core/DeviceGuard.h>
#include <torch/csrc/autograd/grad_mode.h>

#include <algorithm>
#include <string>

#include "base/compat/torch_compat.hpp"
#include "base/str.hpp"
#include "ddp/base/errors.hpp"

namespace ddp::parallel::detail {
namespace {

std::vector<at::Tensor> buffers_of(const torch::nn::AnyModule& module) {
  return module.ptr()->buffers();
}

// Rethrows the exception being handled with the replica named; ddp's own
// error types keep their type (and so their exit code), others become
// ddp::Error.
[[noreturn]] void rethrow_for_replica(size_t index, const c10::Device& device, const char* phase) {
  const std::string where = base::detail::str("DataParallel: replica ", index, " (on ",
                                              device.str(), ") failed in ", phase, ": ");
  try {
    throw;
  } catch (const Error& e) {
    e.rethrow_with_prefix(where);  // keeps the kind, and so the exit code
    throw;                         // not reached: rethrow_with_prefix always throws
  } catch (const c10::Error& e) {
    throw Error(where + e.what_without_backtrace());
  } catch (const std::exception& e) {
    throw Error(where + e.what());
  } catch (...) {
    throw Error(where + "an exception that is not a std::exception.");
  }
}

}  // namespace

ReplicaSet::ReplicaSet(torch::nn::AnyModule primary, std::vector<c10::Device> devices)
    : workers_(devices.empty() ? 0 : devices.size() - 1) {
  for (size_t i = 0; i < devices.size(); ++i) {
    Replica replica{i == 0 ? primary : primary.clone(devices[i]), devices[i], {}, {}};
    replica.parameters = replica.module.ptr()->parameters();
    replica.buffers = buffers_of(replica.module);
    replicas_.push_back(std::move(replica));
  }
}

void ReplicaSet::attach_hooks() {
  std::weak_ptr<ReplicaSet> weak = weak_from_this();
  for (size_t r = 1; r < replicas_.size(); ++r) {
    for (const auto& parameter : replicas_[r].parameters) {
      if (!parameter.requires_grad()) continue;
      accumulators_.push_back(base::compat::add_post_accumulate_grad_hook(parameter, [weak] {
        if (auto self = weak.lock()) self->on_replica_gradient();
      }));
    }
  }
}

bool ReplicaSet::primary_changed_since_refresh() const {
  const auto& primary = replicas_[0].parameters;
  if (refreshed_versions_.size() != primary.size()) return true;
  for (size_t j = 0; j < primary.size(); ++j) {
    if (primary[j]._version() != refreshed_versions_[j]) return true;
  }
  return false;
}

// Note [When replicas are refreshed]
// Copying into a replica's parameters is an in-place write, and autograd
// refuses a backward through a graph whose saved tensors were written since.
// So while a forward's graph still awaits its backward (two forwards, then
// one backward of the summed losses) the replicas are left as they are,
// unless the primary's parameters changed in the meantime (their version
// counters moved). The primary's buffers may have moved (batch norm), but
// replicas' own statistics are discarded anyway (Note [Buffers follow
// PyTorch's DataParallel]), and in eval mode, where statistics matter, they
// do not move.
void ReplicaSet::refresh(size_t count) {
  bool keep = false;
  {
    std::lock_guard<std::mutex> lock(hook_mutex_);
    keep = awaiting_backward_ && !primary_changed_since_refresh();
  }
  torch::NoGradGuard no_grad;
  const Replica& primary = replicas_[0];
  const bool training = primary.module.ptr()->is_training();
  for (size_t r = 1; r < count; ++r) {
    Replica& replica = replicas_[r];
    replica.module.ptr()->train(training);
    if (keep && r < refreshed_up_to_) continue;
    for (size_t j = 0; j < replica.parameters.size(); ++j) {
      replica.parameters[j].copy_(primary.parameters[j]);
      // Frozen (or unfrozen) since construction: follow the primary.
      replica.parameters[j].requires_grad_(primary.parameters[j].requires_grad());
    }
    for (size_t j = 0; j < replica.buffers.size(); ++j) {
      replica.buffers[j].copy_(primary.buffers[j]);
    }
  }
  if (keep) {
    refreshed_up_to_ = std::max(refreshed_up_to_, count);
    return;
  }
  refreshed_up_to_ = count;
  refreshed_versions_.clear();
  for (const auto& parameter : primary.parameters)
    refreshed_versions_.push_back(parameter._version());
}

void ReplicaSet::run(size_t count, const char* phase, const std::function<void(size_t)>& task) {
  std::lock_guard<std::mutex> lock(run_mutex_);
  last_used_.store(count);
  const at::ThreadLocalState caller_state;
  workers_.run(count, [&](size_t index) {
    try {
      at::ThreadLocalStateGuard state(caller_state);
      c10::OptionalDeviceGuard device(replicas_[index].device);
      task(index);
    } catch (...) {
      rethrow_for_replica(index, replicas_[index].device, phase);
    }
  });
}

void ReplicaSet::expect_backward(size_t count) {
  std::lock_guard<std::mutex> lock(hook_mutex_);
  awaiting_backward_ = true;
  used_since_reduction_ = std::max(used_since_reduction_, count);
}

void ReplicaSet::on_replica_gradient() {
  if (reducing_manually_.load()) return;
  std::lock_guard<std::mutex> lock(hook_mutex_);
  if (reduction_queued_) return;
  reduction_queued_ = true;
  std::weak_ptr<ReplicaSet> weak = weak_from_this();
  base::compat::queue_backward_callback([weak] {
    auto self = weak.lock();
    if (!self) return;
    size_t count = 0;
    {
      std::lock_guard<std::mutex> lock(self->hook_mutex_);
      self->reduction_queued_ = false;
      self->awaiting_backward_ = false;
      count = std::max<size_t>(self->used_since_reduction_, 1);
      self->used_since_reduction_ = 0;
    }
    self->reduce_gradients(count);
  });
}

// The primary's device receives every replica's gradient; a replica on the
// same device hands its gradient tensor over without a copy.
void ReplicaSet::reduce_gradients(size_t count) {
  torch::NoGradGuard no_grad;
  const Replica& primary = replicas_[0];
  for (size_t r = 1; r < count && r < replicas_.size(); ++r) {
    Replica& replica = replicas_[r];
    for (size_t j = 0; j < replica.parameters.size(); ++j) {
      at::Tensor& incoming = replica.parameters[j].mutable_grad();
      if (!incoming.defined()) continue;
      const at::Tensor& target = primary.parameters[j];
      if (!target.requires_grad()) {
        incoming = at::Tensor();
        continue;
      }
      at::Tensor& grad = target.mutable_grad();
      if (grad.defined()) {
        grad.add_(incoming.to(grad.device()));
      } else {
        grad = incoming.to(target.device());
      }
      incoming = at::Tensor();
    }
  }
}

void ReplicaSet::discard_gradients(size_t count) {
  for (size_t r = 1; r < count && r < replicas_.size(); ++r) {
    for (auto& parameter : replicas_[r].parameters) parameter.mutable_grad() = at::Tensor();
  }
}

}  // namespace ddp::parallel::detail

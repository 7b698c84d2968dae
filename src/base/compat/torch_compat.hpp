#pragma once

// The one place where differences between LibTorch versions are handled.
// ddp builds against Debian 12's LibTorch 1.13.1 (CPU) and against LibTorch
// 2.x with CUDA; nothing outside this header tests a version number.

#include <torch/version.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#define DDP_TORCH_AT_LEAST(major, minor) \
  (TORCH_VERSION_MAJOR > (major) ||      \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

#if DDP_TORCH_AT_LEAST(2, 0)
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif
#if DDP_TORCH_AT_LEAST(2, 2)
#include <ATen/ops/_foreach_copy.h>
#endif

#include <ATen/autocast_mode.h>
#include <c10/core/Allocator.h>
#include <torch/csrc/autograd/engine.h>
#include <torch/csrc/autograd/function.h>
#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/optim/optimizer.h>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <type_traits>

namespace ddp::base::compat {

// Note [c10d backends across versions]
// In 1.13 each backend (ProcessGroupGloo, ProcessGroupNCCL) derives from
// c10d::ProcessGroup. From 2.0 on, backends derive from c10d::Backend and
// c10d::ProcessGroup became a dispatcher over them. The collective methods
// ddp calls (allreduce, broadcast, allgather, alltoall_base, barrier,
// _reduce_scatter_base) have the same signatures on both, so ddp holds the
// backend through this alias.
#if DDP_TORCH_AT_LEAST(2, 0)
using Backend = c10d::Backend;
#else
using Backend = c10d::ProcessGroup;
#endif

using BackendPtr = c10::intrusive_ptr<Backend>;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;
using StorePtr = c10::intrusive_ptr<c10d::Store>;

// Gloo learned bfloat16 in LibTorch 2.x; 1.13 rejects it ("Invalid scalar
// type"), so ddp carries bfloat16 through Gloo itself on older versions.
#if DDP_TORCH_AT_LEAST(2, 1)
inline constexpr bool kGlooHasBFloat16 = true;
#else
inline constexpr bool kGlooHasBFloat16 = false;
#endif

// The arguments of c10d::ProcessGroupGloo::AsyncWork's constructor before
// its input tensors: later versions put the operation's type and a sequence
// number (for c10d's own flight recorder, which ddp does not feed) after the
// output tensors. Checked against 1.13 and 2.6.
#if DDP_TORCH_AT_LEAST(2, 3)
#define DDP_GLOO_ASYNC_WORK_ARGS(outputs, op_type, title) \
  (outputs), c10d::OpType::op_type, 0, (title)
#else
#define DDP_GLOO_ASYNC_WORK_ARGS(outputs, op_type, title) (outputs), (title)
#endif

// A host allocator ddp installs as c10's CPU allocator (Note [A
// construction's blocks outside the heap]): later versions made
// c10::Allocator::allocate non-const and added the pure copy_data that
// clone() calls. Checked against 1.13 and 2.6.
struct CpuAllocator : c10::Allocator {
  virtual c10::DataPtr allocate_bytes(size_t bytes) const = 0;
#if DDP_TORCH_AT_LEAST(2, 3)
  c10::DataPtr allocate(size_t bytes) override { return allocate_bytes(bytes); }
  void copy_data(void* destination, const void* source, size_t bytes) const override {
    default_copy_data(destination, source, bytes);
  }
#else
  c10::DataPtr allocate(size_t bytes) const override { return allocate_bytes(bytes); }
#endif
};

// Note [Gradient hooks on the accumulator]
// DistributedDataParallel must act after a gradient has been accumulated
// into .grad (so that accumulation under no_sync is included).
//
// Note [Hooks that do not hold the accumulator]
// LibTorch 2.2 and later run a tensor's post-accumulate-grad hook (PyTorch's
// register_post_accumulate_grad_hook) from whatever AccumulateGrad node the
// current graph made for it, so nothing needs to hold that node: it is
// made afresh by each forward, on that forward's CUDA stream. Holding it
// (the only way in 1.13, a post-hook on the node, which the variable holds
// only weakly) pins it to the stream it was made on, and a backward on
// another stream, such as a CUDA graph's capture stream, must then join
// the legacy default stream, which capture forbids. A tensor has one such
// hook slot; a hook already there runs first. The returned node (1.13
// only; null on 2.2+) must be kept alive by the caller.
#if DDP_TORCH_AT_LEAST(2, 2)
namespace detail {
class ChainedPostAccumulateGradHook final : public torch::autograd::PostAccumulateGradHook {
 public:
  ChainedPostAccumulateGradHook(std::unique_ptr<torch::autograd::PostAccumulateGradHook> previous,
                                std::function<void()> hook)
      : previous_(std::move(previous)), hook_(std::move(hook)) {}
  void operator()(const torch::autograd::Variable& tensor) override {
    if (previous_) (*previous_)(tensor);
    hook_();
  }

 private:
  std::unique_ptr<torch::autograd::PostAccumulateGradHook> previous_;
  std::function<void()> hook_;
};
}  // namespace detail
#endif

inline std::shared_ptr<torch::autograd::Node> add_post_accumulate_grad_hook(
    const at::Tensor& parameter, std::function<void()> hook) {
#if DDP_TORCH_AT_LEAST(2, 2)
  auto previous = std::move(torch::autograd::impl::post_acc_grad_hooks(parameter));
  torch::autograd::impl::set_post_acc_grad_hooks(
      parameter, std::make_unique<detail::ChainedPostAccumulateGradHook>(std::move(previous),
                                                                         std::move(hook)));
  return nullptr;
#else
  auto accumulator = torch::autograd::impl::grad_accumulator(parameter);
  accumulator->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
      [hook = std::move(hook)](const torch::autograd::variable_list& outputs,
                               const torch::autograd::variable_list& /*inputs*/) {
        hook();
        return outputs;
      }));
  return accumulator;
#endif
}

// Note [Optimizer state keys]
// Optimizer::state() maps a parameter to its state. LibTorch 1.13 keys it by
// the text of the parameter's TensorImpl address (c10::guts::to_string,
// which 2.x removed); 2.x keys it by the address itself (void*). The key
// type is read off the map, so no version number is needed.
using OptimizerStateKey =
    std::decay_t<decltype(std::declval<const torch::optim::Optimizer&>().state())>::key_type;

namespace detail {
template <typename Key>
Key optimizer_state_key(c10::TensorImpl* impl) {
  if constexpr (std::is_same_v<Key, std::string>) {
    std::ostringstream text;
    text << static_cast<void*>(impl);
    return text.str();
  } else {
    return impl;
  }
}
}  // namespace detail

/// The key of `parameter`'s entry in Optimizer::state().
inline OptimizerStateKey optimizer_state_key(const at::Tensor& parameter) {
  return detail::optimizer_state_key<OptimizerStateKey>(parameter.unsafeGetTensorImpl());
}

/// Runs `callback` once the current backward pass has finished; only valid
/// while a backward pass is running (from a hook).
inline void queue_backward_callback(std::function<void()> callback) {
  torch::autograd::Engine::get_default_engine().queue_callback(std::move(callback));
}

// Note [Fused unscaling]
// at::_amp_foreach_non_finite_check_and_unscale_ checks a list of gradients
// for inf/NaN and multiplies them by the inverse scale in one kernel. Its CUDA
// kernel exists in every supported version; the CPU kernel came with 2.3
// (pytorch#109281). Elsewhere GradScaler checks and scales each gradient.
inline bool has_fused_unscale(c10::DeviceType device) {
#if DDP_TORCH_AT_LEAST(2, 3)
  return device == c10::DeviceType::CUDA || device == c10::DeviceType::CPU;
#else
  return device == c10::DeviceType::CUDA;
#endif
}

// Note [Copying a bucket in one call]
// at::_foreach_copy_ (LibTorch 2.2 on) copies a list of tensors into another
// with one multi-tensor kernel launch on CUDA where 1.13 needs one copy_ per
// tensor. The values are the same either way.
inline void copy_each(at::TensorList destinations, at::TensorList sources) {
#if DDP_TORCH_AT_LEAST(2, 2)
  if (destinations.empty()) return;  // the foreach kernels refuse empty lists
  at::_foreach_copy_(destinations, sources);
#else
  for (size_t i = 0; i < destinations.size(); ++i) destinations[i].copy_(sources[i]);
#endif
}

// Note [c10d's TCPStore across versions]
// Under torchrun's agent store ddp's ranks are clients of a c10d TCPStore
// server, so they use c10d's own client (Note [Joining torchrun's store] in
// src/comm/init.cpp). LibTorch 2.x's options have useLibUV, on by default in 2.6,
// and a LibTorch built without libuv (Debian 13's 2.6) refuses it even for a
// client ("use_libuv was requested but PyTorch was build without libuv
// support"). A client's requests are the same either way, so ddp turns it
// off wherever the field exists; 1.13 has no such field.
namespace detail {
template <typename Options>
auto use_classic_tcp_store(Options& options, int) -> decltype(options.useLibUV = false, void()) {
  options.useLibUV = false;
}
template <typename Options>
void use_classic_tcp_store(Options& /*options*/, long) {}  // no libuv backend to avoid
}  // namespace detail

/// A c10d::TCPStore at `host`:`port`: a client, or with `is_server` the
/// server too (tests stand in for torchrun's agent with one). Waits up to
/// `timeout` for the server; c10::Error when it cannot be reached.
inline c10::intrusive_ptr<c10d::TCPStore> make_c10d_tcp_store(const std::string& host, int port,
                                                              bool is_server,
                                                              std::chrono::milliseconds timeout) {
  c10d::TCPStoreOptions options;
  options.port = static_cast<std::uint16_t>(port);
  options.isServer = is_server;
  options.waitWorkers = false;
  options.timeout = timeout;
  detail::use_classic_tcp_store(options, 0);
  return c10::make_intrusive<c10d::TCPStore>(host, options);
}

// Note [Autocast across versions]
// LibTorch 1.13 up to 2.3 have one set of autocast functions per device type
// (set_enabled/set_autocast_gpu_dtype for CUDA, set_cpu_enabled/
// set_autocast_cpu_dtype for CPU); 2.4 replaced them by functions taking the
// device type and deprecated the old ones. ddp uses CPU and CUDA only.
#if DDP_TORCH_AT_LEAST(2, 4)
inline bool autocast_enabled(c10::DeviceType device) {
  return at::autocast::is_autocast_enabled(device);
}
inline void set_autocast_enabled(c10::DeviceType device, bool enabled) {
  at::autocast::set_autocast_enabled(device, enabled);
}
inline c10::ScalarType autocast_dtype(c10::DeviceType device) {
  return at::autocast::get_autocast_dtype(device);
}
inline void set_autocast_dtype(c10::DeviceType device, c10::ScalarType dtype) {
  at::autocast::set_autocast_dtype(device, dtype);
}
#else
inline bool autocast_enabled(c10::DeviceType device) {
  return device == c10::kCUDA ? at::autocast::is_enabled() : at::autocast::is_cpu_enabled();
}
inline void set_autocast_enabled(c10::DeviceType device, bool enabled) {
  if (device == c10::kCUDA) {
    at::autocast::set_enabled(enabled);
  } else {
    at::autocast::set_cpu_enabled(enabled);
  }
}
inline c10::ScalarType autocast_dtype(c10::DeviceType device) {
  return device == c10::kCUDA ? at::autocast::get_autocast_gpu_dtype()
                              : at::autocast::get_autocast_cpu_dtype();
}
inline void set_autocast_dtype(c10::DeviceType device, c10::ScalarType dtype) {
  if (device == c10::kCUDA) {
    at::autocast::set_autocast_gpu_dtype(dtype);
  } else {
    at::autocast::set_autocast_cpu_dtype(dtype);
  }
}
#endif

}  // namespace ddp::base::compat

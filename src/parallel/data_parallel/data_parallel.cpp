#include "ddp/parallel/data_parallel.hpp"

#include <torch/cuda.h>
#include <torch/torch.h>

#include <string>

#include "base/str.hpp"
#include "ddp/base/errors.hpp"
#include "parallel/data_parallel/replica_set.hpp"
#include "parallel/data_parallel/tensor_sequential.hpp"

namespace ddp::parallel {
namespace {

std::vector<c10::Device> default_devices() {
  std::vector<c10::Device> devices;
  const auto count = torch::cuda::device_count();
  for (size_t i = 0; i < count; ++i) {
    devices.emplace_back(c10::kCUDA, static_cast<c10::DeviceIndex>(i));
  }
  if (devices.empty()) devices.emplace_back(c10::kCPU);
  return devices;
}

// "cuda" (the current device) matches any CUDA device index.
bool on_device(const at::Tensor& tensor, const c10::Device& device) {
  return tensor.device().type() == device.type() &&
         (!device.has_index() || tensor.device().index() == device.index());
}

void check_placement(torch::nn::Module& module, const c10::Device& device) {
  auto check = [&](const std::string& name, const at::Tensor& tensor) {
    if (on_device(tensor, device)) return;
    throw ConfigError("DataParallel: '" + name + "' is on " + tensor.device().str() +
                      " but the module must live on the first device, " + device.str() +
                      ", which holds replica 0 and gathers the gradients; call "
                      "module->to(" +
                      device.str() + ") first or list that device first.");
  };
  for (const auto& item : module.named_parameters()) check(item.key(), item.value());
  for (const auto& item : module.named_buffers()) check(item.key(), item.value());
}

void check_input(const char* what, const at::Tensor& tensor) {
  if (!tensor.defined() || tensor.dim() == 0 || tensor.size(0) == 0) {
    throw InvalidArgumentError(base::detail::str(
        "DataParallel: the ", what, " is ",
        !tensor.defined() ? std::string("undefined")
                          : base::detail::str("of shape ", tensor.sizes()),
        "; it must hold at least one sample along dimension 0, which is split across the "
        "replicas."));
  }
}

}  // namespace

DataParallelImpl::DataParallelImpl(WrappedModule module, DataParallelOptions options)
    : module_(detail::as_tensor_module(module)), options_(std::move(options)) {
  if (module_.is_empty()) {
    throw ConfigError("DataParallel: the module is empty; pass the module to replicate.");
  }
  if (options_.devices().empty()) options_.devices(default_devices());
  if (!options_.output_device()) options_.output_device(options_.devices().front());
  register_module("module", module_.ptr());
  check_placement(*module_.ptr(), options_.devices().front());
  try {
    replicas_ = std::make_shared<detail::ReplicaSet>(module_, options_.devices());
  } catch (const c10::Error& e) {
    throw ConfigError(std::string("DataParallel: cannot replicate the module (") +
                      e.what_without_backtrace() +
                      "). Replicas are deep copies made with "
                      "clone(): derive the module from torch::nn::Cloneable<YourImpl>.");
  }
  replicas_->attach_hooks();
}

DataParallelImpl::~DataParallelImpl() = default;

std::shared_ptr<torch::nn::Module> DataParallelImpl::replica(size_t index) const {
  if (index >= replicas_->size()) {
    throw InvalidArgumentError(base::detail::str("DataParallel: replica ", index,
                                                 " does not exist; there are ", replicas_->size(),
                                                 " (one per device)."));
  }
  return replicas_->module(index).ptr();
}

size_t DataParallelImpl::replicas_used() const { return replicas_->last_used(); }

torch::Tensor DataParallelImpl::forward(const torch::Tensor& input) {
  check_input("input", input);
  std::vector<torch::Tensor> chunks = input.chunk(static_cast<int64_t>(replicas_->size()), 0);
  const size_t count = chunks.size();
  replicas_->refresh(count);
  std::vector<torch::Tensor> outputs(count);
  replicas_->run(count, "forward", [&](size_t i) {
    outputs[i] = replicas_->module(i).forward(chunks[i].to(replicas_->device(i)));
    if (outputs[i].dim() == 0) {
      throw InvalidArgumentError(
          "the output is a scalar, but DataParallel gathers outputs "
          "along dimension 0; return one row per sample, or compute "
          "the loss with forward_backward().");
    }
  });
  for (auto& output : outputs) output = output.to(*options_.output_device());
  torch::Tensor gathered = count == 1 ? outputs.front() : torch::cat(outputs, 0);
  if (gathered.requires_grad()) replicas_->expect_backward(count);
  return gathered;
}

torch::Tensor DataParallelImpl::forward_backward(const torch::Tensor& input,
                                                 const torch::Tensor& target,
                                                 const LossFunction& loss_fn) {
  check_input("input", input);
  check_input("target", target);
  if (target.size(0) != input.size(0)) {
    throw InvalidArgumentError(base::detail::str("DataParallel: the target has ", target.size(0),
                                                 " samples along dimension 0 but the input has ",
                                                 input.size(0), "; pass one target per sample."));
  }
  if (!torch::GradMode::is_enabled()) {
    throw InvalidArgumentError(
        "DataParallel: forward_backward() runs backward, but gradients "
        "are disabled here (a NoGradGuard is active); call forward() "
        "for inference.");
  }
  auto check_scalar = [](const torch::Tensor& loss) {
    if (loss.numel() != 1) {
      throw InvalidArgumentError(base::detail::str(
          "the loss has shape ", loss.sizes(),
          "; the loss function must return a scalar (reduce it with mean or sum)."));
    }
  };
  const c10::Device output_device = *options_.output_device();
  if (!options_.balanced_memory()) {
    torch::Tensor loss = loss_fn(forward(input), target.to(output_device));
    check_scalar(loss);
    loss.backward();
    return loss.detach();
  }
  std::vector<torch::Tensor> inputs = input.chunk(static_cast<int64_t>(replicas_->size()), 0);
  std::vector<torch::Tensor> targets = target.chunk(static_cast<int64_t>(replicas_->size()), 0);
  const size_t count = inputs.size();
  const double batch = static_cast<double>(input.size(0));
  replicas_->refresh(count);
  std::vector<torch::Tensor> losses(count);
  replicas_->set_reducing_manually(true);
  struct RestoreHooks {
    detail::ReplicaSet& replicas;
    ~RestoreHooks() { replicas.set_reducing_manually(false); }
  } restore{*replicas_};
  auto run_replica = [&](size_t i) {
    const c10::Device device = replicas_->device(i);
    torch::Tensor output = replicas_->module(i).forward(inputs[i].to(device));
    torch::Tensor loss = loss_fn(output, targets[i].to(device));
    check_scalar(loss);
    if (options_.loss_reduction() == LossReduction::kMean) {
      loss = loss * (static_cast<double>(inputs[i].size(0)) / batch);
    }
    loss.backward();
    losses[i] = loss.detach().reshape({}).to(output_device);
  };
  try {
    replicas_->run(count, "forward_backward", run_replica);
  } catch (...) {
    replicas_->discard_gradients(count);  // Never let them reach a later step.
    throw;
  }
  replicas_->reduce_gradients(count);
  torch::Tensor total = losses.front();
  for (size_t i = 1; i < count; ++i) total = total + losses[i];
  return total;
}

}  // namespace ddp::parallel

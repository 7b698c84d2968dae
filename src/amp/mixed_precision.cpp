#include <torch/torch.h>

#include <optional>
#include <unordered_map>

#include "base/dtype_name.hpp"
#include "ddp/amp/mixed_precision.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/broadcast_tensors.hpp"
#include "ddp/comm/process_group.hpp"
#include "nn/batch_norm_layers.hpp"

namespace ddp::amp {
namespace {

bool is_half(const at::Tensor& t) {
  return t.scalar_type() == at::kHalf || t.scalar_type() == at::kBFloat16;
}

// The one device type of the model's parameters (kCPU for a model without).
c10::DeviceType device_type_of(torch::nn::Module& model) {
  std::optional<c10::Device> device;
  for (const auto& item : model.named_parameters()) {
    const c10::Device here = item.value().device();
    if (!device) {
      device = here;
    } else if (*device != here) {
      throw ConfigError("MixedPrecision: the model's parameters are on several devices (" +
                        device->str() + " and " + here.str() + " for '" + item.key() +
                        "'); move the whole model to one device first");
    }
  }
  return device ? device->type() : c10::kCPU;
}

}  // namespace

MixedPrecision::MixedPrecision(torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                               AmpOptions options, std::shared_ptr<ProcessGroup> group)
    : options_(options), device_type_(device_type_of(model)), optimizer_(&optimizer) {
  const OptLevel level = options_.opt_level();
  if (level != OptLevel::kO0) check_half_dtype(options_.dtype(), device_type_, "MixedPrecision");
  const bool casts = level == OptLevel::kO2 || level == OptLevel::kO3;
  if (casts && !optimizer.state().empty()) {
    throw ConfigError(std::string("MixedPrecision: the optimizer already holds state (it has "
                                  "stepped or loaded a checkpoint); opt level ") +
                      to_string(level) +
                      " changes the parameters it steps, so create "
                      "MixedPrecision right after the optimizer and restore state afterwards");
  }
  // Rank 0's parameters on every rank, before any casting.
  if (group && group->size() > 1) broadcast_tensors(*group, model.parameters(), 0);
  if (!casts) return;

  // Which tensors the optimizer steps, to give them masters at O2.
  std::unordered_map<const void*, std::string> names;
  for (const auto& item : model.named_parameters()) {
    names.emplace(item.value().unsafeGetTensorImpl(), item.key());
  }
  std::unordered_map<const void*, at::Tensor> master_of;
  torch::NoGradGuard no_grad;
  for (const auto& module : model.modules(/*include_self=*/true)) {
    if (level == OptLevel::kO2 && nn::detail::is_batch_norm(*module)) continue;  // stays float32
    for (auto tensors : {module->named_parameters(false), module->named_buffers(false)}) {
      for (auto& item : tensors) {
        at::Tensor& tensor = item.value();
        if (!tensor.defined() || !tensor.is_floating_point() ||
            tensor.scalar_type() == options_.dtype()) {
          continue;
        }
        if (level == OptLevel::kO2 && tensor.requires_grad()) {
          at::Tensor master = tensor.detach().clone().requires_grad_(true);
          master_of.emplace(tensor.unsafeGetTensorImpl(), master);
          auto name = names.find(tensor.unsafeGetTensorImpl());
          masters_.push_back({tensor, master, name != names.end() ? name->second : item.key()});
        }
        tensor.set_data(tensor.to(options_.dtype()));
      }
    }
  }
  for (auto& param_group : optimizer.param_groups()) {
    for (auto& parameter : param_group.params()) {
      auto found = master_of.find(parameter.unsafeGetTensorImpl());
      if (found != master_of.end()) parameter = found->second;
    }
  }
  // Masters of parameters the optimizer does not step are never used.
  std::vector<MasterPair> stepped;
  for (auto& pair : masters_) {
    for (const auto& param_group : optimizer.param_groups()) {
      for (const auto& parameter : param_group.params()) {
        if (parameter.unsafeGetTensorImpl() == pair.master.unsafeGetTensorImpl()) {
          stepped.push_back(pair);
        }
      }
    }
  }
  masters_ = std::move(stepped);
}

at::Tensor MixedPrecision::cast_input(const at::Tensor& input) const {
  const OptLevel level = options_.opt_level();
  if ((level == OptLevel::kO2 || level == OptLevel::kO3) && input.defined() &&
      input.is_floating_point()) {
    return input.to(options_.dtype());
  }
  return input;
}

at::Tensor MixedPrecision::cast_output(const at::Tensor& output) const {
  return output.defined() && is_half(output) ? output.to(at::kFloat) : output;
}

void MixedPrecision::zero_grad() {
  optimizer_->zero_grad();
  for (auto& pair : masters_) {
    at::Tensor& grad = pair.model.mutable_grad();
    if (grad.defined()) {
      grad = grad.detach();
      grad.zero_();
    }
  }
  gradients_widened_ = false;
}

void MixedPrecision::widen_gradients_into_masters() {
  if (gradients_widened_) return;
  torch::NoGradGuard no_grad;
  for (auto& pair : masters_) {
    const at::Tensor& grad = pair.model.grad();
    at::Tensor& master_grad = pair.master.mutable_grad();
    if (!grad.defined()) {
      master_grad = at::Tensor();  // the optimizer skips it, as it would the model's
    } else if (master_grad.defined() && master_grad.sizes() == grad.sizes()) {
      master_grad.copy_(grad);
    } else {
      master_grad = grad.to(pair.master.scalar_type(), /*non_blocking=*/false, /*copy=*/true);
    }
  }
  gradients_widened_ = true;
}

void MixedPrecision::copy_masters_into_model() {
  torch::NoGradGuard no_grad;
  for (auto& pair : masters_) pair.model.copy_(pair.master);
}

void MixedPrecision::unscale_(GradScaler& scaler) {
  widen_gradients_into_masters();
  scaler.unscale_(*optimizer_);
}

bool MixedPrecision::step(GradScaler& scaler) {
  widen_gradients_into_masters();
  const bool stepped = scaler.step(*optimizer_);  // unscales first if needed
  if (stepped) copy_masters_into_model();
  gradients_widened_ = false;
  return stepped;
}

void MixedPrecision::step() {
  widen_gradients_into_masters();
  optimizer_->step();
  copy_masters_into_model();
  gradients_widened_ = false;
}

std::map<std::string, at::Tensor> MixedPrecision::master_weights() const {
  std::map<std::string, at::Tensor> weights;
  for (const auto& pair : masters_) weights.emplace("amp.master/" + pair.name, pair.master);
  return weights;
}

}  // namespace ddp::amp

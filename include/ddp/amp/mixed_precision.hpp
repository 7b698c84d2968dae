#pragma once

/// \file mixed_precision.hpp
/// Mixed-precision training with Apex's opt levels O0-O3.
///
/// \code
///   ConvNet net;                                        // float32, on its device
///   torch::optim::SGD optimizer(net->parameters(), 0.05);
///   ddp::amp::MixedPrecision amp(*net, optimizer,       // casts for O2/O3, masters for O2
///       ddp::amp::AmpOptions(ddp::amp::parse_opt_level("O2")), group);
///   ddp::DistributedDataParallel model(net, group);     // wrap after amp, never before
///   ddp::amp::GradScaler scaler({}, group);             // overflow skips agree across ranks
///   for (auto& batch : *loader) {
///     amp.zero_grad();                                  // optimizer's and model's gradients
///     auto output = amp.forward(model, batch.data);     // O1 autocast / O2,O3 16-bit input;
///                                                       // float32 output at every level
///     auto loss = torch::nll_loss(output, batch.target);
///     scaler.scale(loss).backward();                    // DDP reduces the model's gradients
///     amp.unscale_(scaler);                             // optional: before clipping
///     amp.step(scaler);                                 // skipped on overflow (every rank)
///     scaler.update();
///   }
/// \endcode

#include <ATen/core/Tensor.h>
#include <torch/arg.h>
#include <torch/nn/module.h>
#include <torch/optim/optimizer.h>

#include <map>
#include <memory>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "ddp/amp/autocast.hpp"
#include "ddp/amp/grad_scaler.hpp"
#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::amp {

/// Options of MixedPrecision.
struct AmpOptions {
  /// Options for `opt_level`.
  /* implicit */ AmpOptions(OptLevel opt_level = OptLevel::kO1) : opt_level_(opt_level) {}
  /// What runs in 16 bits (see OptLevel).
  TORCH_ARG(OptLevel, opt_level);
  /// The 16-bit type: bfloat16 (default; on CPU the only choice) or float16
  /// (CUDA only; pair it with a GradScaler, its range is small).
  TORCH_ARG(c10::ScalarType, dtype) = c10::ScalarType::BFloat16;
};

/// Apex's `amp.initialize(model, optimizer, opt_level)` for LibTorch: applies
/// an opt level to a model and its optimizer, and provides the pieces of a
/// training loop that differ between levels, so that one loop (the example
/// at the top of this file) serves all four.
///
/// Note [Master weights]
/// At O2 each 16-bit parameter that the optimizer updates gets a float32
/// master copy, and the optimizer's param groups are re-pointed at the
/// masters: small updates that a 16-bit weight would round away accumulate
/// in float32. Backward leaves 16-bit gradients on the model (where
/// DistributedDataParallel reduces them); unscale_() widens them into the
/// masters' gradients and unscales them there, in float32; step() steps the
/// masters and rounds them back into the model; call this class's
/// unscale_(), not the scaler's, since only it fills the masters' gradients.
/// Parameters that stay float32 (batch norm) are their own masters. Model
/// first, then MixedPrecision, then DistributedDataParallel: casting after
/// wrapping would detach DDP's gradient hooks.
class MixedPrecision {
 public:
  /// Applies `options` to `model` (already on its device) and `optimizer`
  /// (built on the model's parameters, not yet stepped): O2 casts all but
  /// batch-norm layers (BatchNorm1d/2d/3d, ddp::nn::SyncBatchNorm) to 16 bits
  /// and creates float32 masters; O3 casts everything. With `group`, rank
  /// 0's float32 parameters are first copied to every rank, so that the
  /// masters agree across ranks (DDP aligns only the model's own copies).
  /// \throws ConfigError for a bad dtype/device pair, a model on several
  ///   devices, or an optimizer that already holds state (O2).
  MixedPrecision(torch::nn::Module& model, torch::optim::Optimizer& optimizer,
                 AmpOptions options = {}, std::shared_ptr<ProcessGroup> group = nullptr);

  /// The autocast region for a forward pass: active at O1, a no-op guard at
  /// the other levels.
  [[nodiscard]] AutocastGuard autocast() const {
    return AutocastGuard(device_type_, options_.dtype(), options_.opt_level() == OptLevel::kO1);
  }
  /// At O2/O3 a floating-point `input` cast to the 16-bit type (the model's
  /// first layer expects it); otherwise `input` unchanged.
  at::Tensor cast_input(const at::Tensor& input) const;
  /// A 16-bit floating-point `output` widened to float32 (losses should be
  /// computed in float32); anything else unchanged.
  at::Tensor cast_output(const at::Tensor& output) const;

  /// `model->forward(inputs...)` inside autocast() with tensor inputs passed
  /// through cast_input() and the result through cast_output(). `model` is a
  /// module holder (the DDP wrapper or the model itself) or a pointer.
  template <typename Model, typename... Inputs>
  at::Tensor forward(Model& model, Inputs&&... inputs) const {
    auto guard = autocast();
    return cast_output(model->forward(cast_argument(std::forward<Inputs>(inputs))...));
  }

  /// Zeroes the optimizer's gradients and, at O2, the model's 16-bit ones.
  void zero_grad();
  /// Makes the optimizer's gradients true (unscaled) gradients, once per
  /// iteration: at O2 first widens the model's 16-bit gradients into the
  /// masters; then `scaler.unscale_(optimizer)`. Call it before clipping
  /// the optimizer's gradients; step() calls it when you do not.
  void unscale_(GradScaler& scaler);
  /// unscale_(scaler) if not yet done, `scaler.step(optimizer)` (skipped when
  /// a gradient overflowed, on any rank of the scaler's group), and at O2 the
  /// masters rounded back into the model. Returns whether the step ran.
  bool step(GradScaler& scaler);
  /// As step(scaler) without loss scaling (bfloat16 rarely needs it): O2
  /// widens the gradients into the masters, steps, copies back.
  void step();

  /// The float32 master weights (O2), keyed "amp.master/<parameter name>";
  /// the live tensors. Add them to ddp::snapshot::TrainingState::extra_tensors so that
  /// a snapshot restores them in place; empty at other levels.
  std::map<std::string, at::Tensor> master_weights() const;
  /// The options in force.
  const AmpOptions& options() const noexcept { return options_; }
  /// The device type the model lives on (kCPU or kCUDA).
  c10::DeviceType device_type() const noexcept { return device_type_; }

 private:
  template <typename T>
  decltype(auto) cast_argument(T&& value) const {
    if constexpr (std::is_same_v<std::decay_t<T>, at::Tensor>) {
      return cast_input(value);
    } else {
      return std::forward<T>(value);
    }
  }
  void widen_gradients_into_masters();
  void copy_masters_into_model();

  AmpOptions options_;
  c10::DeviceType device_type_ = c10::DeviceType::CPU;
  torch::optim::Optimizer* optimizer_;
  std::vector<at::Tensor> model_parameters_;
  /// O2: (16-bit model parameter, float32 master, name).
  struct MasterPair {
    at::Tensor model, master;
    std::string name;
  };
  std::vector<MasterPair> masters_;
  bool gradients_widened_ = false;
};

}  // namespace ddp::amp

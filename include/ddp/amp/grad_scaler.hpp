#pragma once

/// \file grad_scaler.hpp
/// Dynamic loss scaling, as PyTorch's `torch.cuda.amp.GradScaler`, with the
/// overflow decision shared by every rank of a process group.
///
/// \code
///   ddp::amp::GradScaler scaler(ddp::amp::GradScalerOptions(), group);
///   optimizer.zero_grad();
///   scaler.scale(loss).backward();
///   scaler.unscale_(optimizer);                  // optional, before clipping
///   torch::nn::utils::clip_grad_norm_(model->parameters(), 1.0);
///   scaler.step(optimizer);                      // skipped if any rank overflowed
///   scaler.update();
/// \endcode

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/arg.h>
#include <torch/optim/optimizer.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "ddp/comm/process_group_fwd.hpp"

namespace torch::serialize {
class InputArchive;
class OutputArchive;
}  // namespace torch::serialize

namespace ddp::amp {

/// Options of GradScaler (PyTorch's defaults).
struct GradScalerOptions {
  /// The first loss scale; positive and finite.
  TORCH_ARG(double, init_scale) = 65536.0;
  /// The scale is multiplied by this after growth_interval steps in a row
  /// without overflow; greater than 1.
  TORCH_ARG(double, growth_factor) = 2.0;
  /// The scale is multiplied by this after an overflow; in (0, 1).
  TORCH_ARG(double, backoff_factor) = 0.5;
  /// Overflow-free steps before the scale grows; at least 1.
  TORCH_ARG(int64_t, growth_interval) = 2000;
  /// When false every method passes through: scale() returns the loss,
  /// step() always steps, the scale stays 1.
  TORCH_ARG(bool, enabled) = true;
};

/// What a GradScaler carries from one step to the next; what it saves.
struct GradScalerState {
  double scale = 65536.0;          ///< The current loss scale.
  int64_t growth_tracker = 0;      ///< Overflow-free steps since the scale last changed.
  double growth_factor = 2.0;      ///< As in GradScalerOptions.
  double backoff_factor = 0.5;     ///< As in GradScalerOptions.
  int64_t growth_interval = 2000;  ///< As in GradScalerOptions.
};

/// Multiplies the loss by a scale so that small 16-bit gradients do not flush
/// to zero, divides the gradients by it before the optimizer steps, skips
/// steps whose gradients overflowed (inf or NaN) and adapts the scale:
/// backoff after an overflow, growth after growth_interval clean steps.
///
/// Note [One overflow decision for all ranks]
/// A rank whose gradients overflow must skip its step, and if another rank
/// stepped, the replicas would differ from then on. With a process group,
/// step() and update() combine every rank's found-inf flag with one max
/// all-reduce (a single float) before deciding, so all ranks skip the same
/// steps and keep the same scale. Every rank must then call step() and
/// update() together. DistributedDataParallel's averaged gradients already
/// carry an inf to every rank; the all-reduce also covers gradients changed
/// after the reduction and training without DDP.
class GradScaler {
 public:
  /// A scaler; with `group`, overflow decisions are combined across its
  /// ranks. \throws ConfigError for invalid options, naming the value.
  explicit GradScaler(GradScalerOptions options = {},
                      std::shared_ptr<ProcessGroup> group = nullptr);

  /// `loss * scale` (the loss itself when disabled).
  at::Tensor scale(const at::Tensor& loss) const;
  /// Divides the gradients of `optimizer`'s parameters by the scale, in
  /// place, and records whether any is inf or NaN. Idempotent until the next
  /// update(): a second call for the same optimizer does nothing.
  /// \throws InvalidArgumentError when called after step() for that optimizer.
  void unscale_(torch::optim::Optimizer& optimizer);
  /// unscale_() if not yet done, then `optimizer.step()` unless a gradient
  /// overflowed on this or (with a group) any other rank. Returns whether
  /// the optimizer stepped. \throws InvalidArgumentError when called twice
  /// for one optimizer before update().
  bool step(torch::optim::Optimizer& optimizer);
  /// Adapts the scale from the overflows of every optimizer unscaled since
  /// the last update (or sets `new_scale`), and starts the next iteration.
  /// \throws InvalidArgumentError when no optimizer was unscaled or stepped
  ///   (without `new_scale`); ConfigError for a `new_scale` that is not
  ///   positive and finite.
  void update(std::optional<double> new_scale = std::nullopt);

  /// The current scale (1 when disabled).
  double get_scale() const noexcept;
  /// Overflow-free steps since the scale last changed.
  int64_t get_growth_tracker() const noexcept { return state_.growth_tracker; }
  /// Whether scaling is on.
  bool is_enabled() const noexcept { return options_.enabled(); }
  /// Whether the last step() of this iteration (or the last iteration,
  /// before update()) found an overflow on any rank.
  bool found_inf() const noexcept { return last_found_inf_; }

  /// The state to save.
  GradScalerState state() const { return state_; }
  /// Restores a saved state (options included). \throws ConfigError for
  /// invalid values, naming them.
  void load_state(const GradScalerState& state);
  /// Writes the state into `archive` (keys "scale", "growth_tracker",
  /// "growth_factor", "backoff_factor", "growth_interval").
  void save(torch::serialize::OutputArchive& archive) const;
  /// Reads a state written by save(). \throws ConfigError when a key is
  ///   missing or not a scalar, or a value is invalid (as load_state()).
  void load(torch::serialize::InputArchive& archive);

 private:
  /// Per optimizer, between two update() calls.
  struct Record {
    bool unscaled = false;
    bool stepped = false;
    std::vector<std::pair<c10::Device, at::Tensor>> found_inf_per_device;
    std::optional<bool> combined;  ///< The decision, once taken.
  };
  Record& record_for(const torch::optim::Optimizer& optimizer);
  bool combined_found_inf(Record& record);

  GradScalerOptions options_;
  std::shared_ptr<ProcessGroup> group_;
  GradScalerState state_;
  /// In first-use order, which every rank shares, so that the collectives
  /// of update() pair up across ranks.
  std::vector<std::pair<const torch::optim::Optimizer*, Record>> records_;
  bool last_found_inf_ = false;
};

}  // namespace ddp::amp

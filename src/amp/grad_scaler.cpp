#include "ddp/amp/grad_scaler.hpp"

#include <torch/torch.h>

#include <cmath>
#include <sstream>
#include <string>

#include "base/compat/torch_compat.hpp"
#include "base/str.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/parallel/captured_step.hpp"

namespace ddp::amp {
namespace {

std::string number(double value) {
  std::ostringstream text;
  text << value;
  return text.str();
}

// Checks the values that options and saved states share.
void validate(double scale, double growth_factor, double backoff_factor, int64_t growth_interval,
              const std::string& who) {
  if (!(scale > 0) || !std::isfinite(scale)) {
    throw ConfigError(who + ": the scale is " + number(scale) +
                      "; it must be positive and finite (PyTorch starts at 65536)");
  }
  if (!(growth_factor > 1) || !std::isfinite(growth_factor)) {
    throw ConfigError(who + ": growth_factor is " + number(growth_factor) +
                      "; it must be a finite number above 1 (default 2)");
  }
  if (!(backoff_factor > 0 && backoff_factor < 1)) {
    throw ConfigError(who + ": backoff_factor is " + number(backoff_factor) +
                      "; it must lie strictly between 0 and 1 (default 0.5)");
  }
  if (growth_interval < 1) {
    throw ConfigError(base::detail::str(who, ": growth_interval is ", growth_interval,
                                        "; it must be at least 1 step (default 2000)"));
  }
}

}  // namespace

GradScaler::GradScaler(GradScalerOptions options, std::shared_ptr<ProcessGroup> group)
    : options_(options), group_(std::move(group)) {
  validate(options_.init_scale(), options_.growth_factor(), options_.backoff_factor(),
           options_.growth_interval(), "GradScalerOptions");
  state_.scale = static_cast<float>(options_.init_scale());  // PyTorch keeps it in float32
  state_.growth_factor = options_.growth_factor();
  state_.backoff_factor = options_.backoff_factor();
  state_.growth_interval = options_.growth_interval();
}

at::Tensor GradScaler::scale(const at::Tensor& loss) const {
  if (!options_.enabled()) return loss;
  // A 16-bit loss is widened first: 65536 times a float16 loss would overflow.
  const bool half = loss.scalar_type() == at::kHalf || loss.scalar_type() == at::kBFloat16;
  return (half ? loss.to(at::kFloat) : loss) * state_.scale;
}

GradScaler::Record& GradScaler::record_for(const torch::optim::Optimizer& optimizer) {
  for (auto& [key, record] : records_) {
    if (key == &optimizer) return record;
  }
  records_.emplace_back(&optimizer, Record{});
  return records_.back().second;
}

void GradScaler::unscale_(torch::optim::Optimizer& optimizer) {
  if (!options_.enabled()) return;
  Record& record = record_for(optimizer);
  if (record.stepped) {
    throw InvalidArgumentError(
        "GradScaler::unscale_: step() already ran for this optimizer in this iteration; "
        "unscale_() belongs between backward() and step(), and update() starts the next "
        "iteration");
  }
  if (record.unscaled) return;  // idempotent until update()
  // The reciprocal in double, rounded once to float32, as PyTorch does.
  const float inverse = static_cast<float>(1.0 / state_.scale);
  torch::NoGradGuard no_grad;
  // Gradients grouped by device and dtype, so that each group is checked and
  // unscaled by one fused kernel where LibTorch has one (Note [Fused unscaling]).
  struct Batch {
    c10::Device device;
    at::ScalarType dtype;
    std::vector<at::Tensor> grads;
  };
  std::vector<Batch> batches;
  for (auto& group : optimizer.param_groups()) {
    for (auto& parameter : group.params()) {
      if (!parameter.grad().defined()) continue;
      at::Tensor grad = parameter.mutable_grad();
      if (grad.is_sparse()) {
        parameter.mutable_grad() = grad = grad.coalesce();
        grad = grad._values();
      }
      Batch* batch = nullptr;
      for (auto& candidate : batches) {
        if (candidate.device == grad.device() && candidate.dtype == grad.scalar_type()) {
          batch = &candidate;
        }
      }
      if (batch == nullptr)
        batch = &batches.emplace_back(Batch{grad.device(), grad.scalar_type(), {}});
      batch->grads.push_back(grad);
    }
  }
  for (auto& batch : batches) {
    at::Tensor* flag = nullptr;
    for (auto& [device, found] : record.found_inf_per_device) {
      if (device == batch.device) flag = &found;
    }
    if (flag == nullptr) {
      record.found_inf_per_device.emplace_back(
          batch.device, at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(batch.device)));
      flag = &record.found_inf_per_device.back().second;
    }
    if (base::compat::has_fused_unscale(batch.device.type())) {
      const at::Tensor inverse_scale =
          at::full({1}, inverse, at::TensorOptions().dtype(at::kFloat).device(batch.device));
      // Sets the flag to 1 when a gradient holds inf or NaN (checked before
      // scaling), and multiplies every gradient by the inverse scale.
      at::_amp_foreach_non_finite_check_and_unscale_(batch.grads, *flag, inverse_scale);
    } else {
      for (auto& grad : batch.grads) {
        flag->add_(grad.isfinite().logical_not().any());  // checked before scaling, as PyTorch
        grad.mul_(inverse);
      }
    }
  }
  record.unscaled = true;
}

bool GradScaler::combined_found_inf(Record& record) {
  if (record.combined) return *record.combined;
  // Note [One overflow decision for all ranks]: one float, on the gradients'
  // device so that an NCCL-only group can reduce it.
  const c10::Device device = record.found_inf_per_device.empty()
                                 ? c10::Device(c10::kCPU)
                                 : record.found_inf_per_device.front().first;
  at::Tensor flag = at::zeros({1}, at::TensorOptions().dtype(at::kFloat).device(device));
  for (auto& entry : record.found_inf_per_device) flag.add_(entry.second.to(device));
  if (group_ && group_->size() > 1) group_->all_reduce(flag, ReduceOp::kMax);
  record.combined = flag.item<float>() > 0;
  return *record.combined;
}

bool GradScaler::step(torch::optim::Optimizer& optimizer) {
  if (!options_.enabled()) {
    optimizer.step();
    return true;
  }
  if (capturing_step()) {
    throw InvalidArgumentError(
        "GradScaler::step inside a captured step (ddp::CapturedStep): whether to step or skip "
        "depends on the overflow flag, read on the host, which a CUDA graph cannot replay; run "
        "this step eagerly, or train in bfloat16 without a scaler");
  }
  Record& record = record_for(optimizer);
  if (record.stepped) {
    throw InvalidArgumentError(
        "GradScaler::step: step() already ran for this optimizer since the last update(); "
        "call update() once per iteration, after the step");
  }
  unscale_(optimizer);  // no-op when the caller already unscaled
  const bool overflow = combined_found_inf(record);
  record.stepped = true;
  last_found_inf_ = overflow;
  if (!overflow) optimizer.step();
  return !overflow;
}

void GradScaler::update(std::optional<double> new_scale) {
  if (!options_.enabled()) return;
  if (new_scale) {
    validate(*new_scale, state_.growth_factor, state_.backoff_factor, state_.growth_interval,
             "GradScaler::update(new_scale)");
    state_.scale = static_cast<float>(*new_scale);
    records_.clear();
    return;
  }
  if (records_.empty()) {
    throw InvalidArgumentError(
        "GradScaler::update: no optimizer was unscaled or stepped since the last update(), so "
        "there is no overflow check to update the scale from; call step(optimizer) first");
  }
  bool overflow = false;
  for (auto& entry : records_) overflow = combined_found_inf(entry.second) || overflow;
  if (overflow) {
    state_.scale = static_cast<float>(state_.scale * state_.backoff_factor);
    state_.growth_tracker = 0;
  } else if (++state_.growth_tracker == state_.growth_interval) {
    const float grown = static_cast<float>(state_.scale * state_.growth_factor);
    if (std::isfinite(grown)) state_.scale = grown;
    state_.growth_tracker = 0;
  }
  last_found_inf_ = overflow;
  records_.clear();
}

double GradScaler::get_scale() const noexcept { return options_.enabled() ? state_.scale : 1.0; }

void GradScaler::load_state(const GradScalerState& state) {
  validate(state.scale, state.growth_factor, state.backoff_factor, state.growth_interval,
           "GradScaler::load_state");
  if (state.growth_tracker < 0 || state.growth_tracker >= state.growth_interval) {
    throw ConfigError(base::detail::str("GradScaler::load_state: growth_tracker is ",
                                        state.growth_tracker, "; it must lie in [0, ",
                                        state.growth_interval, ") (the growth interval)"));
  }
  state_ = state;
  records_.clear();
}

void GradScaler::save(torch::serialize::OutputArchive& archive) const {
  archive.write("scale", torch::tensor(state_.scale, torch::kDouble));
  archive.write("growth_tracker", torch::tensor(state_.growth_tracker, torch::kLong));
  archive.write("growth_factor", torch::tensor(state_.growth_factor, torch::kDouble));
  archive.write("backoff_factor", torch::tensor(state_.backoff_factor, torch::kDouble));
  archive.write("growth_interval", torch::tensor(state_.growth_interval, torch::kLong));
}

void GradScaler::load(torch::serialize::InputArchive& archive) {
  auto read = [&](const char* key) {
    at::Tensor value;
    if (!archive.try_read(key, value) || value.numel() != 1) {
      throw ConfigError(std::string("GradScaler::load: the archive has no scalar '") + key +
                        "'; it was not written by GradScaler::save");
    }
    return value;
  };
  GradScalerState state;
  state.scale = read("scale").item<double>();
  state.growth_tracker = read("growth_tracker").item<int64_t>();
  state.growth_factor = read("growth_factor").item<double>();
  state.backoff_factor = read("backoff_factor").item<double>();
  state.growth_interval = read("growth_interval").item<int64_t>();
  load_state(state);
}

}  // namespace ddp::amp

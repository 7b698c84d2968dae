#pragma once

/// \file autocast.hpp
/// Opt levels of mixed-precision training and the autocast region that
/// opt level O1 runs its forward pass in.

#include <c10/core/DeviceType.h>
#include <c10/core/ScalarType.h>

#include <string>

namespace ddp::amp {

/// Apex's opt levels.
enum class OptLevel {
  kO0,  ///< Plain float32: nothing changes (a baseline).
  kO1,  ///< Autocast: matrix multiplies and convolutions run in 16 bits,
        ///< the ops autocast lists as sensitive (losses, for one) in float32;
        ///< the model and the optimizer stay float32.
  kO2,  ///< The model in 16 bits except batch-norm layers; the optimizer
        ///< steps float32 master copies of the 16-bit parameters.
  kO3,  ///< Everything in 16 bits, batch norm included; no master copies.
};

/// Parses "O0", "O1", "O2" or "O3" (Apex's spelling).
/// \throws ConfigError naming the value for anything else.
OptLevel parse_opt_level(const std::string& text);

/// "O0", "O1", "O2" or "O3".
const char* to_string(OptLevel level) noexcept;

/// Runs the code in its scope under autocast for one device type, as
/// PyTorch's `torch.autocast(device_type, dtype)` context manager does:
/// eligible ops (convolutions, linear layers, matrix products) cast their
/// inputs to `dtype`, numerically sensitive ops run in float32. The previous
/// autocast state of that device type is restored on destruction, so guards
/// nest; leaving the outermost one drops autocast's cache of cast weights.
/// Autocast state is thread-local: backward, run outside the guard, uses the
/// dtypes that forward recorded.
///
/// Note [Autocast per device type]
/// CPU autocast supports bfloat16 only (LibTorch 1.13 ignores float16 with
/// a warning, and has no float16 convolution on CPU at all); CUDA autocast
/// supports float16 and bfloat16. The guard rejects other combinations
/// rather than let autocast silently do nothing.
class AutocastGuard {
 public:
  /// Enables autocast to `dtype` for `device` (kCPU or kCUDA) while alive;
  /// with `enabled` false it changes nothing (a no-op guard, so that one
  /// training loop serves every opt level).
  /// \throws ConfigError for another device type, a dtype other than
  ///   bfloat16/float16, or float16 on CPU.
  AutocastGuard(c10::DeviceType device, c10::ScalarType dtype, bool enabled = true);
  /// Restores the previous autocast state of the device type.
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;
  AutocastGuard(AutocastGuard&&) = delete;
  AutocastGuard& operator=(AutocastGuard&&) = delete;

  /// Whether this guard turned autocast on.
  bool active() const noexcept { return active_; }

 private:
  c10::DeviceType device_;
  bool active_ = false;
  bool previous_enabled_ = false;
  c10::ScalarType previous_dtype_ = c10::ScalarType::Undefined;
};

/// Checks that `dtype` is a 16-bit floating type usable on `device`:
/// bfloat16 anywhere, float16 on CUDA only.
/// \throws ConfigError naming the dtype and device, and what to use instead.
void check_half_dtype(c10::ScalarType dtype, c10::DeviceType device, const char* who);

}  // namespace ddp::amp

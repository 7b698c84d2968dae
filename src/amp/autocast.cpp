#include "ddp/amp/autocast.hpp"

#include "base/compat/torch_compat.hpp"
#include "base/dtype_name.hpp"
#include "ddp/base/errors.hpp"

namespace ddp::amp {

OptLevel parse_opt_level(const std::string& text) {
  if (text == "O0") return OptLevel::kO0;
  if (text == "O1") return OptLevel::kO1;
  if (text == "O2") return OptLevel::kO2;
  if (text == "O3") return OptLevel::kO3;
  throw ConfigError("unknown mixed-precision opt level '" + text +
                    "'; use O0 (float32), O1 (autocast), O2 (16-bit model with float32 master "
                    "weights) or O3 (pure 16-bit), with a capital letter O");
}

const char* to_string(OptLevel level) noexcept {
  switch (level) {
    case OptLevel::kO0:
      return "O0";
    case OptLevel::kO1:
      return "O1";
    case OptLevel::kO2:
      return "O2";
    case OptLevel::kO3:
      return "O3";
  }
  return "O?";
}

void check_half_dtype(c10::ScalarType dtype, c10::DeviceType device, const char* who) {
  const std::string prefix = std::string(who) + ": ";
  if (device != c10::kCPU && device != c10::kCUDA) {
    throw ConfigError(prefix + "mixed precision supports CPU and CUDA models, not " +
                      c10::DeviceTypeName(device) + "; move the model to one of them");
  }
  if (dtype != c10::ScalarType::BFloat16 && dtype != c10::ScalarType::Half) {
    throw ConfigError(prefix + "the 16-bit type is " + base::detail::dtype_name(dtype) +
                      "; use bfloat16 or (on CUDA) float16");
  }
  if (dtype == c10::ScalarType::Half && device == c10::kCPU) {
    throw ConfigError(prefix +
                      "float16 needs a CUDA model: LibTorch has no float16 convolution "
                      "and no float16 autocast on CPU; use bfloat16 on CPU (the default)");
  }
}

AutocastGuard::AutocastGuard(c10::DeviceType device, c10::ScalarType dtype, bool enabled)
    : device_(device) {
  if (!enabled) return;
  check_half_dtype(dtype, device, "autocast");
  previous_enabled_ = base::compat::autocast_enabled(device);
  previous_dtype_ = base::compat::autocast_dtype(device);
  base::compat::set_autocast_enabled(device, true);
  base::compat::set_autocast_dtype(device, dtype);
  at::autocast::increment_nesting();
  active_ = true;
}

AutocastGuard::~AutocastGuard() {
  if (!active_) return;
  // Leaving the outermost region: the casts of weights cached while it ran
  // would be stale after the optimizer changes the weights.
  if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
  base::compat::set_autocast_enabled(device_, previous_enabled_);
  base::compat::set_autocast_dtype(device_, previous_dtype_);
}

}  // namespace ddp::amp

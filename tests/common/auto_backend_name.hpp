#pragma once

// The name backend "auto" reports, which depends on the machine: NCCL joins
// the CPU backend where ddp carries it and LibTorch sees a CUDA device.

#include <ATen/Context.h>

#include <string>

#include "comm/backends/backends.hpp"

namespace ddp::testing {

/// "auto(<cpu_backend>)", or "auto(<cpu_backend>,nccl)" on a CUDA machine.
inline std::string auto_backend_name(const std::string& cpu_backend) {
  const bool nccl = backends::nccl_compiled_in() && at::hasCUDA();
  return "auto(" + cpu_backend + (nccl ? ",nccl" : "") + ")";
}

}  // namespace ddp::testing

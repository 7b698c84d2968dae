#pragma once

// The name backend "auto" reports, which depends on the machine: NCCL joins
// the CPU engine where ddp carries it and LibTorch sees a CUDA device.

#include <ATen/Context.h>

#include <string>

#include "comm/backends/backends.hpp"

namespace ddp::testing {

/// "auto(<cpu_engine>)", or "auto(<cpu_engine>,nccl)" on a CUDA machine.
inline std::string autoBackendName(const std::string& cpu_engine) {
  const bool nccl = backends::ncclCompiledIn() && at::hasCUDA();
  return "auto(" + cpu_engine + (nccl ? ",nccl" : "") + ")";
}

}  // namespace ddp::testing

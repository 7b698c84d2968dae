#pragma once

// The one place where differences between LibTorch versions are handled.
// ddp builds against Debian 12's LibTorch 1.13.1 (CPU) and against LibTorch
// 2.x with CUDA; nothing outside this header tests a version number.

#include <torch/version.h>

#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>
#include <torch/csrc/distributed/c10d/Work.hpp>

#define DDP_TORCH_AT_LEAST(major, minor)   \
  (TORCH_VERSION_MAJOR > (major) ||        \
   (TORCH_VERSION_MAJOR == (major) && TORCH_VERSION_MINOR >= (minor)))

#if DDP_TORCH_AT_LEAST(2, 0)
#include <torch/csrc/distributed/c10d/Backend.hpp>
#endif

namespace ddp::compat {

// Note [c10d backends across versions]
// In 1.13 each engine (ProcessGroupGloo, ProcessGroupNCCL) derives from
// c10d::ProcessGroup. From 2.0 on, engines derive from c10d::Backend and
// c10d::ProcessGroup became a dispatcher over them. The collective methods
// ddp calls (allreduce, broadcast, allgather, alltoall_base, barrier,
// _reduce_scatter_base) have the same signatures on both, so ddp holds the
// engine through this alias.
#if DDP_TORCH_AT_LEAST(2, 0)
using Engine = c10d::Backend;
#else
using Engine = c10d::ProcessGroup;
#endif

using EnginePtr = c10::intrusive_ptr<Engine>;
using WorkPtr = c10::intrusive_ptr<c10d::Work>;
using StorePtr = c10::intrusive_ptr<c10d::Store>;

// Gloo learned bfloat16 in LibTorch 2.x; 1.13 rejects it ("Invalid scalar
// type"), so ddp carries bfloat16 through Gloo itself on older versions.
#if DDP_TORCH_AT_LEAST(2, 1)
inline constexpr bool kGlooHasBFloat16 = true;
#else
inline constexpr bool kGlooHasBFloat16 = false;
#endif

}  // namespace ddp::compat

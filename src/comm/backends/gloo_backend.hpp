#pragma once

// Internal: c10d's ProcessGroupGloo with two collectives of ddp's own, run
// on the backend's worker threads like its own collectives.
//
// Note [Gloo collectives without a full-size copy]
// c10d's Gloo all-gather receives into a flat buffer of the whole output and
// then copies it into the caller's tensors, and LibTorch 1.13's Gloo has no
// reduce-scatter at all (ddp used an all-to-all into a receive buffer as
// large as the input). For FSDP both are a third unit-sized buffer beside
// the unit being gathered or reduced: 0.19 GiB a unit on the 454M-parameter
// transformer of docs/benchmarks.md. These two hold no more than the
// collective needs:
//  - all_gather_into: Gloo's ring all-gather, receiving straight into the
//    caller's output, any dtype (the bytes are moved, never combined);
//  - reduce_scatter_ring: a ring reduce-scatter through one chunk-sized
//    scratch buffer and the output (the left neighbour's partial sum
//    arrives in one while the other is sent on, alternating so that the
//    last partial is received into the output itself); the scratch is kept
//    between calls (Note [The ring's scratch outside the heap]).
//    Each rank sends and receives (N-1)/N of the input, as the all-to-all
//    did, and the input is left as it was.
// Both take the backend's next tag, so they are ordered with every other
// collective of the group, and report errors and timeouts through c10d's
// Work like Gloo's own. Both read and write host memory: CUDA tensors keep
// c10d's path, which stages them on the host.

#include <ATen/ATen.h>
#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>

#include <chrono>

#include "base/compat/torch_compat.hpp"
#include "comm/backends/ring_scratch.hpp"
#include "ddp/comm/reduce_op.hpp"

namespace ddp::comm::backends {

class GlooBackend final : public c10d::ProcessGroupGloo {
 public:
  using c10d::ProcessGroupGloo::ProcessGroupGloo;

  /// Gathers every rank's `input` into `output` (world size × input's
  /// elements, both contiguous, on the CPU), in rank order, without a
  /// staging copy.
  base::compat::WorkPtr all_gather_into(const at::Tensor& output, const at::Tensor& input,
                                        std::chrono::milliseconds timeout);

  /// Combines `input` (world size chunks of `output`'s elements, both
  /// contiguous, on the CPU, the same dtype) across ranks with `op` and leaves this
  /// rank's chunk in `output`. kAverage sums: the caller divides.
  base::compat::WorkPtr reduce_scatter_ring(const at::Tensor& output, const at::Tensor& input,
                                            ReduceOp op, std::chrono::milliseconds timeout);

 private:
  std::shared_ptr<RingScratch> scratch_ = std::make_shared<RingScratch>();
};

}  // namespace ddp::comm::backends

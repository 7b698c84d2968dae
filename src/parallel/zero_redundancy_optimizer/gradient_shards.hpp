#pragma once

// Internal: ZeroRedundancyOptimizer's stage 2, the averaging of gradients
// into each rank's chunks, as a policy over the shared bucketing engine
// (Note [One bucketing engine, two policies] in gradient_buckets.hpp).
//
// Note [Stage 2 overlaps backward]
// Every parameter's gradient accumulator is hooked. In the last of
// backward_passes_per_step passes, once every gradient of a bucket is
// ready, the bucket is copied into a flat buffer padded to world x chunk
// elements (each .grad is released there) and reduce-scattered at once,
// while backward goes on computing the gradients of earlier layers. Buckets
// are launched strictly in bucket order, so every rank issues the same
// collectives in the same order whatever order its gradients arrive in; a
// bucket with a parameter that got no gradient waits for step(), which
// launches every bucket still waiting (a missing gradient is zeros), waits
// for all, divides, and exchanges which parameters got a gradient on any
// rank. The flat buffers live from their launch to step(), so the memory of
// full gradients peaks at one model's worth (not two, as copying at step()
// would) and drops to a chunk per bucket after it. Consequences for users:
// after the last pass no .grad is left to clip or inspect; a gradient
// computed more often than backward_passes_per_step before step() is an
// error, as is zero_grad() between the last pass and step(). Under a Join,
// the step's round is started before its first collective (in the hook
// that launches it, or in step()).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "ddp/comm/process_group_fwd.hpp"
#include "ddp/comm/work.hpp"
#include "parallel/bucketing/gradient_buckets.hpp"

namespace ddp::parallel::detail {

class GradientShards : public std::enable_shared_from_this<GradientShards> {
 public:
  /// Buckets `parameters` as `settings` say (see group_parameters()).
  GradientShards(std::vector<at::Tensor> parameters, BucketSettings settings,
                 std::shared_ptr<ProcessGroup> group);

  /// Installs the per-parameter hooks; call once, after construction.
  void attach_hooks();

  /// The buckets' members, in bucket order (their flats are empty between
  /// steps).
  const std::vector<Bucket>& buckets() const { return buckets_.buckets(); }
  /// This rank's averaged gradients of bucket `b`, after synchronize().
  const at::Tensor& grad_chunk(size_t b) const { return grad_chunks_[b]; }

  /// Called once per step, before its first collective: starts a Join
  /// round and returns the divisor of the summed gradients.
  void set_step_start(std::function<double()> step_start);

  /// On a rank still training: launches every bucket not launched yet,
  /// waits, and leaves the averaged chunks in grad_chunk(). Returns, per
  /// parameter, whether any rank had a gradient for it. A new step begins.
  std::vector<int32_t> synchronize();
  /// On a joined rank: the same collectives with zeros, averaged by
  /// `divisor`.
  std::vector<int32_t> shadow(double divisor);

  /// Whether a backward pass launched reduce-scatters since the last step.
  bool launched() const;

 private:
  void on_gradient_accumulated(size_t index);
  void start_step();
  Work launch(size_t b, bool contribute);
  std::vector<int32_t> finish(bool contribute);
  void reset_step();

  std::shared_ptr<ProcessGroup> group_;
  int64_t passes_per_step_;
  GradientBuckets buckets_;
  std::vector<at::Tensor> grad_chunks_;  // per bucket: ceil(elements / world)
  mutable std::mutex mutex_;
  std::vector<int32_t> received_;  // per parameter, this step
  std::function<double()> step_start_;
  bool step_started_ = false;
  double divisor_ = 1.0;
};

}  // namespace ddp::parallel::detail

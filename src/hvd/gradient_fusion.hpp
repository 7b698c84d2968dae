#pragma once

// Internal: what hvd::DistributedOptimizer does with gradients (see Note
// [When gradients travel] in ddp/hvd/distributed_optimizer.hpp): its
// policy over the shared bucketing engine (Note [One bucketing engine, two
// policies] in src/parallel/bucketing/gradient_buckets.hpp). Its buckets are fusion buffers.

#include <ATen/core/Tensor.h>

#include <functional>

#include <memory>
#include <mutex>
#include <vector>

#include "ddp/hvd/distributed_optimizer.hpp"
#include "parallel/bucketing/gradient_buckets.hpp"

namespace ddp::hvd::detail {

class GradientFusion : public std::enable_shared_from_this<GradientFusion> {
 public:
  GradientFusion(std::vector<at::Tensor> parameters, std::shared_ptr<ProcessGroup> group,
                 const DistributedOptimizerOptions& options);

  /// Installs the per-parameter hooks; call once, after construction.
  void attach_hooks();

  /// Starts every buffer not started yet, waits for all and writes the
  /// reduced gradients into .grad; then a new step begins.
  void synchronize();

  DistributedOptimizerStats stats() const;
  /// Called once per step, before its first collective (at the first
  /// gradient, or in synchronize()): starts a Join round and returns the
  /// factor applied to the averaged buffers (Note [Joining]).
  void set_step_start(std::function<double()> step_start);
  /// On a joined rank: issues one step's all-reduces with zeros, leaving
  /// the gradients alone.
  void shadow_step();

 private:
  void on_gradient_accumulated(size_t index);
  Work launch(size_t buffer_index);
  Work issue(size_t buffer_index);
  void start_step();
  void unpack(const ddp::parallel::detail::Bucket& buffer);
  void reset_step();

  std::shared_ptr<ProcessGroup> group_;
  DistributedOptimizerOptions options_;
  ddp::parallel::detail::GradientBuckets buffers_;

  mutable std::mutex mutex_;
  DistributedOptimizerStats stats_;
  int64_t launched_during_backward_ = 0;
  std::function<double()> step_start_;
  bool step_started_ = false;
  double join_scale_ = 1.0;
};

}  // namespace ddp::hvd::detail

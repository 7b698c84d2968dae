#pragma once

// Internal: the engine behind hvd::DistributedOptimizer (see Note [When
// gradients travel] in ddp/horovod/distributed_optimizer.hpp).

#include <ATen/core/Tensor.h>

#include <memory>
#include <mutex>
#include <vector>

#include "ddp/horovod/distributed_optimizer.hpp"

namespace torch::autograd {
struct Node;
}  // namespace torch::autograd

namespace ddp::hvd::detail {

/// Gradients of one dtype and device that travel in one all-reduce.
struct FusionBuffer {
  std::vector<size_t> members;   // indices into GradientFusion::parameters_
  std::vector<int64_t> offsets;  // element offset of each member in `flat`
  at::Tensor flat;               // the travelling values (wire dtype)
  size_t pending = 0;            // members not yet ready this step
  Work work;
};

class GradientFusion : public std::enable_shared_from_this<GradientFusion> {
 public:
  GradientFusion(std::vector<at::Tensor> parameters, std::shared_ptr<ProcessGroup> group,
                 const DistributedOptimizerOptions& options);

  /// Installs the per-parameter hooks; call once, after construction.
  void attachHooks();

  /// Starts every buffer not started yet, waits for all and writes the
  /// reduced gradients into .grad; then a new step begins.
  void synchronize();

  DistributedOptimizerStats stats() const;

 private:
  void onGradientAccumulated(size_t index);
  void launchReadyInOrder();
  void launch(size_t buffer_index);
  void unpack(FusionBuffer& buffer);
  void resetStep();
  at::ScalarType wireType(at::ScalarType dtype) const;

  std::vector<at::Tensor> parameters_;
  std::shared_ptr<ProcessGroup> group_;
  DistributedOptimizerOptions options_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<FusionBuffer> buffers_;
  std::vector<size_t> buffer_of_;  // parameter -> buffer

  mutable std::mutex mutex_;
  std::vector<int64_t> passes_left_;  // per parameter, this step
  size_t next_to_launch_ = 0;
  DistributedOptimizerStats stats_;
  int64_t launched_during_backward_ = 0;
};

}  // namespace ddp::hvd::detail

#pragma once

// Internal: the reducer behind DistributedDataParallel. It has two entry
// points, as Flashlight's reducers do: a hook per parameter that marks its
// gradient ready, and a finalization at the end of backward.

#include <ATen/core/Tensor.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ddp/distributed_data_parallel.hpp"

namespace torch::autograd {
struct Node;
}  // namespace torch::autograd

namespace ddp::detail {

/// A group of gradients of one dtype and device, reduced by one collective.
struct Bucket {
  std::vector<size_t> parameters;  // indices into Reducer::parameters_
  std::vector<int64_t> offsets;    // element offset of each in `flat`
  at::Tensor flat;                 // the gradients, back to back
  size_t pending = 0;              // gradients not yet ready this iteration
  Work work;                       // the reduction in flight
};

class Reducer : public std::enable_shared_from_this<Reducer> {
 public:
  Reducer(std::vector<at::Tensor> parameters, std::vector<std::string> names,
          std::shared_ptr<ProcessGroup> group, const DistributedDataParallelOptions& options);

  /// Installs the per-parameter hooks; call once, after construction.
  void attachHooks();

  /// Whether backward passes reduce gradients (false inside no_sync()).
  void setRequireSync(bool value);
  bool requireSync() const;

  ReducerStats stats() const;

 private:
  void onGradientReady(size_t index);
  void finalizeBackward();
  void copyIntoBucket(size_t index);
  void launchReadyBucketsInOrder();
  void launch(Bucket& bucket);
  void waitAndCopyOut(const std::vector<int32_t>& globally_used);
  std::vector<int32_t> exchangeUsage(const std::vector<size_t>& unused);
  void buildBuckets(const std::vector<size_t>& order);
  void rebuildInReadyOrder();
  void resetIteration();
  at::Tensor slice(size_t index) const;
  at::Tensor gradientAlias(size_t index) const;

  std::vector<at::Tensor> parameters_;
  std::vector<std::string> names_;
  std::shared_ptr<ProcessGroup> group_;
  DistributedDataParallelOptions options_;
  std::shared_ptr<CommHook> hook_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;

  std::vector<Bucket> buckets_;
  std::vector<std::pair<size_t, size_t>> location_;  // parameter -> (bucket, position)

  mutable std::mutex mutex_;
  bool require_sync_ = true;
  // Per iteration.
  std::vector<bool> ready_;
  size_t next_to_launch_ = 0;
  bool finalize_queued_ = false;
  int launched_during_backward_ = 0;
  std::vector<size_t> ready_order_;  // first iteration only, for the rebuild
  // Across iterations.
  bool rebuilt_ = false;
  ReducerStats stats_;
};

}  // namespace ddp::detail

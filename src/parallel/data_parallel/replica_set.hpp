#pragma once

// Internal: DataParallel's persistent replicas (see Note [Persistent
// replicas] in ddp/parallel/data_parallel.hpp): creating them, refreshing them from
// the primary, running them on their threads, and adding their gradients
// into the primary's.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>
#include <torch/nn/modules/container/any.h>

#include <atomic>
#include <functional>
#include <memory>
#include <mutex>
#include <vector>

#include "parallel/data_parallel/replica_workers.hpp"

namespace torch::autograd {
struct Node;
}  // namespace torch::autograd

namespace ddp::parallel::detail {

class ReplicaSet : public std::enable_shared_from_this<ReplicaSet> {
 public:
  /// Replica 0 is `primary`; the others are clones on devices[1..].
  ReplicaSet(torch::nn::AnyModule primary, std::vector<c10::Device> devices);

  /// Installs the gradient hooks; call once, after construction.
  void attach_hooks();

  size_t size() const { return replicas_.size(); }
  torch::nn::AnyModule& module(size_t index) { return replicas_[index].module; }
  const c10::Device& device(size_t index) const { return replicas_[index].device; }

  /// Gives replicas 1..count-1 the primary's parameters, buffers and mode
  /// (see Note [When replicas are refreshed] in replica_set.cpp).
  void refresh(size_t count);

  /// Runs task(i) for i < count, each on its replica's thread with the
  /// caller's thread-local state (grad mode, ...) and device. An exception
  /// is rethrown naming the replica and `phase`: a ddp error as its own
  /// type, anything else as ddp::Error.
  void run(size_t count, const char* phase, const std::function<void(size_t)>& task);

  /// The forward just run built a graph that a backward will use.
  void expect_backward(size_t count);
  /// Whether the replicas' gradient hooks leave the reduction to the caller
  /// (balanced forward_backward, which reduces itself after its threads).
  void set_reducing_manually(bool value) { reducing_manually_.store(value); }

  /// Adds the gradients of replicas 1..count-1 into the primary's .grad and
  /// clears theirs.
  void reduce_gradients(size_t count);

  /// Clears the gradients of replicas 1..count-1 (after a failed step).
  void discard_gradients(size_t count);

  size_t last_used() const { return last_used_.load(); }

 private:
  struct Replica {
    torch::nn::AnyModule module;
    c10::Device device;
    std::vector<at::Tensor> parameters;
    std::vector<at::Tensor> buffers;
  };

  void on_replica_gradient();
  bool primary_changed_since_refresh() const;

  std::vector<Replica> replicas_;
  ReplicaWorkers workers_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::mutex run_mutex_;   // one step at a time
  std::mutex hook_mutex_;  // gradient hooks may run on several threads
  bool reduction_queued_ = false;
  std::atomic<bool> reducing_manually_{false};
  std::atomic<size_t> last_used_{0};
  size_t used_since_reduction_ = 0;
  bool awaiting_backward_ = false;
  std::vector<int64_t> refreshed_versions_;  // the primary's, at the last refresh
  size_t refreshed_up_to_ = 0;               // replicas below it hold those values
};

}  // namespace ddp::parallel::detail

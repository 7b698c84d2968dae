#pragma once

// Internal: the one gradient-bucketing engine under DistributedDataParallel's
// reducer (src/parallel/distributed_data_parallel/reducer.hpp) and
// hvd::DistributedOptimizer's gradient fusion (src/hvd/gradient_fusion.hpp).
//
// Note [One bucketing engine, two policies]
// Both group parameters into flat buckets of one dtype and device, install a
// hook on every parameter's gradient accumulator, count each gradient ready,
// launch the buckets' collectives strictly in bucket order (every rank issues
// them in the same order, whatever order its gradients arrive in), wait, and
// reset for the next step. That is this class. What differs is passed in as
// settings (how a cap closes a bucket, the dtype a bucket travels in, how
// many backward passes make a gradient ready) or stays with the caller as
// policy: what a bucket holds when it is launched (the reducer copies each
// gradient in as it arrives; the fusion copies at launch, compressing), what
// travels (a comm hook or an all-reduce), and what happens after the wait
// (unused parameters, bucket views, rebuilding in ready order). The engine
// takes no lock: its callers serialize hook calls and steps with their own.

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "ddp/comm/work.hpp"
#include "parallel/bucketing/bucket_assignment.hpp"

namespace torch::autograd {
struct Node;
}  // namespace torch::autograd

namespace ddp::parallel::detail {

/// A bucket cap given in MiB (`owner`'s option `option`, as PyTorch gives
/// bucket_cap_mb), in bytes: how DDP and ZeRO read their caps alike.
/// \throws ConfigError naming `owner`, `option` and the value when it is not
///   a positive number.
int64_t cap_bytes_of(double mib, const char* owner, const char* option);

/// What differs between the engine's users.
struct BucketSettings {
  /// Cap of the first bucket of each dtype and device, in bytes of the wire
  /// dtype.
  int64_t first_cap_bytes = 0;
  /// Cap of later buckets, in bytes.
  int64_t cap_bytes = 0;
  /// How a cap closes a bucket (see assign_buckets).
  CapRule cap_rule = CapRule::kCloseOnReaching;
  /// The dtype a gradient of a given dtype travels in; empty: its own.
  std::function<c10::ScalarType(c10::ScalarType)> wire_type;
  /// Hook calls per parameter before its gradient is ready: 1, or
  /// backward_passes_per_step for gradients accumulated over several passes.
  int64_t passes_per_step = 1;
};

/// A group of gradients of one dtype and device, reduced by one collective.
struct Bucket {
  std::vector<size_t> members;   ///< Indices into the engine's parameters, in order.
  std::vector<int64_t> offsets;  ///< Element offset of each member in `flat`.
  at::Tensor flat;               ///< The travelling values, back to back.
  size_t pending = 0;            ///< Members not yet ready this step.
  Work work;                     ///< The reduction in flight.
};

/// The buckets GradientBuckets(parameters, settings) groups the parameters
/// listed in `order` into (members only, nothing allocated): what
/// ZeroRedundancyOptimizer lays its parameters out by.
std::vector<std::vector<size_t>> group_parameters(const std::vector<at::Tensor>& parameters,
                                                  const BucketSettings& settings,
                                                  const std::vector<size_t>& order);

class GradientBuckets {
 public:
  /// Groups `parameters` into zeroed buckets in reverse registration order
  /// (initial_bucket_order: gradients become ready roughly from the last
  /// layer to the first), as assign_buckets does.
  GradientBuckets(std::vector<at::Tensor> parameters, BucketSettings settings);

  /// Installs one hook per parameter's gradient accumulator, calling
  /// `on_accumulated(index)` after each accumulation; call once.
  void attach_hooks(const std::function<void(size_t)>& on_accumulated);

  /// Regroups the buckets in `order` (values are lost; a new step begins).
  void rebuild(const std::vector<size_t>& order);

  /// Starts a new step: every gradient not ready, no bucket launched.
  void reset();

  /// Gives each parameter its own number of hook calls per step (DDP's
  /// static graph: what the first iteration counted), replacing
  /// passes_per_step. A parameter given 0 is ready at the start of every
  /// step; its bucket slice keeps whatever it holds (zeros, as built).
  /// Starts a new step.
  void set_passes(std::vector<int64_t> passes);

  /// Backward passes still to come before `index`'s gradient is ready; 0
  /// once it is (the caller decides whether one more is an error).
  int64_t passes_left(size_t index) const { return passes_left_[index]; }

  /// Counts one accumulation of `index`; true when its gradient is ready.
  bool count_pass(size_t index) { return --passes_left_[index] == 0; }

  /// Marks `index`'s gradient final for this step, whatever passes were
  /// counted; true when its bucket has no member left pending.
  bool mark_ready(size_t index);

  /// Launches, in bucket order, every complete bucket whose predecessors
  /// have all been launched; `launch(b)` issues bucket b's collective.
  /// Returns how many it launched.
  size_t launch_ready_in_order(const std::function<Work(size_t)>& launch);

  /// Launches every bucket not launched yet, complete or not.
  size_t launch_rest(const std::function<Work(size_t)>& launch);

  /// The parameters, in the order they were given.
  const std::vector<at::Tensor>& parameters() const { return parameters_; }
  std::vector<Bucket>& buckets() { return buckets_; }
  const std::vector<Bucket>& buckets() const { return buckets_; }
  /// The bucket holding `index`, and its position there.
  size_t bucket_of(size_t index) const { return location_[index].first; }
  /// `index`'s gradient in its bucket, flattened (the wire dtype).
  at::Tensor slice(size_t index) const;
  /// Each bucket's size in bytes, in bucket order.
  std::vector<int64_t> bucket_bytes() const;

 private:
  std::vector<at::Tensor> parameters_;
  BucketSettings settings_;
  std::vector<std::shared_ptr<torch::autograd::Node>> accumulators_;
  std::vector<Bucket> buckets_;
  std::vector<std::pair<size_t, size_t>> location_;  // parameter -> (bucket, position)
  std::vector<int64_t> passes_;                      // per parameter; empty: passes_per_step
  std::vector<int64_t> passes_left_;
  size_t next_to_launch_ = 0;
};

}  // namespace ddp::parallel::detail

#pragma once

// Internal: the reducer behind DistributedDataParallel. It has two entry
// points, as Flashlight's reducers do: a hook per parameter that marks its
// gradient ready, and a finalization at the end of backward. The buckets,
// hooks and ordered launch are the shared engine's (Note [One bucketing
// engine, two policies] in src/parallel/bucketing/gradient_buckets.hpp); DDP's policy is here.

#include <ATen/core/Tensor.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ddp/parallel/distributed_data_parallel.hpp"
#include "parallel/bucketing/gradient_buckets.hpp"
#include "parallel/distributed_data_parallel/mismatch_board.hpp"

namespace ddp::parallel::detail {

/// Whether `grad` starts where `slice` does: accumulated in the bucket.
inline bool is_view_of(const at::Tensor& grad, const at::Tensor& slice) {
  return grad.defined() && grad.data_ptr() == slice.data_ptr();
}

class Reducer : public std::enable_shared_from_this<Reducer> {
 public:
  Reducer(std::vector<at::Tensor> parameters, std::vector<std::string> names,
          std::shared_ptr<ProcessGroup> group, const DistributedDataParallelOptions& options);
  /// Notes on the mismatch board that this rank leaves.
  ~Reducer();

  /// Installs the per-parameter hooks; call once, after construction.
  void attach_hooks();

  /// Makes the end of the backward pass that reaches any of `outputs` (the
  /// tensors of DDP's forward result, Note [Finding the tensors in an
  /// output]) the end of the iteration (Note [The end of backward]).
  void watch_outputs(std::vector<at::Tensor>& outputs);

  /// Whether backward passes reduce gradients (false inside no_sync()).
  void set_require_sync(bool value);
  bool require_sync() const;

  ReducerStats stats() const;

  /// The options that decide which collectives an iteration issues, then
  /// one line per bucket (its parameters and elements): what every rank
  /// must agree on.
  std::vector<std::string> describe_layout() const;

  /// Replaces `failure` of a collective DDP issued for `what` in the
  /// current iteration with what the mismatch board tells (Note [Naming a
  /// mismatch on every rank]); call from the handler that caught it.
  [[noreturn]] void explain_failure(const Error& failure, const std::string& what);

  /// Under a Join, for the coming iteration: the rank bucket layouts are
  /// broadcast from, and the factor applied to every reduced bucket (world
  /// size / contributing ranks when averaging over contributors, else 1).
  void set_join_round(int source, double scale);
  /// On a joined rank: issues the collectives of one synchronized backward
  /// pass with zero gradients (every bucket; the usage exchange with
  /// find_unused_parameters; the first iteration's rebuild), leaving the
  /// parameters' gradients alone.
  void shadow_iteration();

 private:
  void on_gradient_ready(size_t index);
  void queue_finalize();
  void finalize_backward();
  void finish_iteration();
  void finalize_recording();
  void adopt_recorded_counts(const at::Tensor& table);
  [[noreturn]] void throw_missing_gradients(const std::vector<size_t>& missing);
  void fill_bucket(size_t bucket);
  Work launch(size_t bucket);
  void wait_and_copy_out(const std::vector<int32_t>& globally_used);
  std::vector<int32_t> exchange_usage(const std::vector<size_t>& unused);
  at::Tensor exchange_arrivals(bool joined);
  bool recording() const { return options_.static_graph() && expected_.empty(); }
  void adopt_buckets();
  void rebuild_in_ready_order();
  void reset_iteration();
  at::Tensor gradient_alias(size_t index) const;

  std::vector<std::string> names_;
  std::shared_ptr<ProcessGroup> group_;
  DistributedDataParallelOptions options_;
  std::shared_ptr<CommHook> hook_;
  // Note [Alone]: world size 1, the default reduction, the shortcut allowed.
  bool alone_;
  GradientBuckets buckets_;
  std::vector<GradBucket> hook_buckets_;  // what the comm hook sees, per bucket
  // Note [Views made once]: per parameter, its place in its bucket in its
  // own shape, and with gradient_as_bucket_view its .grad; made in
  // adopt_buckets(), after each build of the buckets.
  std::vector<at::Tensor> views_;
  std::vector<at::Tensor> aliases_;

  mutable std::mutex mutex_;
  bool require_sync_ = true;
  // Per iteration.
  bool finalize_queued_ = false;
  size_t arrivals_this_iteration_ = 0;  // hook calls
  int launched_during_backward_ = 0;
  std::vector<size_t> ready_order_;  // first iteration only, for the rebuild
  std::vector<char> arrived_;        // ready through its hook, not yet in its bucket
  // Across iterations.
  bool rebuilt_ = false;
  MismatchBoard board_;
  int64_t forwards_ = 0;            // training forwards whose output needs grad
  bool awaiting_backward_ = false;  // the last one's backward has not run
  // static_graph (Note [Static graph]): the recording iteration's hook calls
  // per parameter and the order of each one's last call, then the counts
  // every rank agreed on.
  std::vector<int64_t> recorded_arrivals_;
  std::vector<int64_t> last_arrival_;
  std::vector<int64_t> expected_;  // empty until recorded
  ReducerStats stats_;
  // Set per iteration under a Join (set_join_round), reset after it.
  int source_rank_ = 0;
  double join_scale_ = 1.0;
};

}  // namespace ddp::parallel::detail

#include "parallel/distributed_data_parallel/reducer.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <numeric>

#include "base/compat/torch_compat.hpp"
#include "base/scope_exit.hpp"
#include "base/str.hpp"
#include "comm/collective_name.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/process_group.hpp"
#include "parallel/bucketing/bucket_assignment.hpp"

namespace ddp::parallel::detail {
namespace {

BucketSettings bucket_settings(const DistributedDataParallelOptions& options) {
  BucketSettings settings;
  settings.first_cap_bytes =
      cap_bytes_of(options.first_bucket_cap_mb(), "DistributedDataParallel", "first_bucket_cap_mb");
  settings.cap_bytes =
      cap_bytes_of(options.bucket_cap_mb(), "DistributedDataParallel", "bucket_cap_mb");
  settings.cap_rule = CapRule::kCloseOnReaching;
  return settings;
}

}  // namespace

Reducer::Reducer(std::vector<at::Tensor> parameters, std::vector<std::string> names,
                 std::shared_ptr<ProcessGroup> group, const DistributedDataParallelOptions& options)
    : names_(std::move(names)),
      group_(std::move(group)),
      options_(options),
      hook_(options.comm_hook() ? options.comm_hook() : all_reduce_hook()),
      alone_(options.single_process_shortcut() && group_->size() == 1 && !options.comm_hook()),
      // Reverse registration order at first; the first iteration tells the
      // real order (Note [Rebuilding buckets in gradient-ready order]).
      buckets_(std::move(parameters), bucket_settings(options)),
      board_(*group_) {
  adopt_buckets();
  reset_iteration();
}

void Reducer::attach_hooks() {
  std::weak_ptr<Reducer> weak = weak_from_this();
  buckets_.attach_hooks([weak](size_t index) {
    if (auto self = weak.lock()) self->on_gradient_ready(index);
  });
}

// Note [The end of backward]
// An iteration ends (buckets waited for, averages copied out, the static
// graph recorded) in a callback that the autograd engine runs when a
// backward pass finishes. Queued from a parameter's hook, it would belong to
// the pass that hook ran in: with reentrant activation checkpointing that is
// the inner pass recomputing one segment, which finishes before the layers
// below the segment have their gradients. So the callback is queued from a
// hook on DDP's output, which runs first in the outermost pass, as PyTorch's
// _DDPSink does; a parameter's hook still queues it when no output hook ran
// (a backward from a tensor that does not reach DDP's output).
void Reducer::watch_outputs(std::vector<at::Tensor>& outputs) {
  const bool any_needs_grad = std::any_of(outputs.begin(), outputs.end(),
                                          [](const at::Tensor& t) { return t.requires_grad(); });
  if (!any_needs_grad) return;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    // Note [Naming a mismatch on every rank]: legal if every rank skips it.
    if (awaiting_backward_) board_.note_skipped_backward(forwards_);
    ++forwards_;
    awaiting_backward_ = require_sync_;
  }
  // One forward, however many tensors it returned: the first backward to
  // reach any of them queues the iteration's end (queue_finalize() queues
  // once), and a tensor the loss did not use never calls its hook.
  std::weak_ptr<Reducer> weak = weak_from_this();
  for (auto& output : outputs) {
    if (!output.requires_grad()) continue;
    output.register_hook([weak](const at::Tensor& /*grad*/) {
      if (auto self = weak.lock()) {
        std::lock_guard<std::mutex> lock(self->mutex_);
        self->awaiting_backward_ = false;
        if (self->require_sync_) self->queue_finalize();
      }
    });
  }
}

Reducer::~Reducer() { board_.note_left(forwards_, stats_.synchronized_iterations); }

void Reducer::queue_finalize() {
  if (finalize_queued_) return;
  finalize_queued_ = true;
  std::weak_ptr<Reducer> weak = weak_from_this();
  base::compat::queue_backward_callback([weak] {
    if (auto self = weak.lock()) self->finalize_backward();
  });
}

void Reducer::set_require_sync(bool value) {
  std::lock_guard<std::mutex> lock(mutex_);
  require_sync_ = value;
}

bool Reducer::require_sync() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return require_sync_;
}

ReducerStats Reducer::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

void Reducer::set_join_round(int source, double scale) {
  std::lock_guard<std::mutex> lock(mutex_);
  source_rank_ = source;
  join_scale_ = scale;
}

void Reducer::shadow_iteration() {
  std::lock_guard<std::mutex> lock(mutex_);
  base::detail::ScopeExit reset_at_exit([this] { reset_iteration(); });
  // The same collectives, in the same order, as finalize_backward() and
  // finalize_recording() on the ranks still training.
  const bool record = recording();
  at::Tensor table;
  if (record) table = exchange_arrivals(/*joined=*/true);
  for (Bucket& bucket : buckets_.buckets()) bucket.flat.zero_();
  buckets_.launch_rest([this](size_t b) { return launch(b); });
  std::vector<int32_t> globally_used;
  if (!expected_.empty()) {
    for (int64_t count : expected_) globally_used.push_back(count > 0 ? 1 : 0);
  } else if (options_.find_unused_parameters() && !options_.static_graph()) {
    std::vector<size_t> all(names_.size());
    std::iota(all.begin(), all.end(), size_t{0});
    globally_used = exchange_usage(all);
  }
  if (record) {
    for (Bucket& bucket : buckets_.buckets()) bucket.work.wait();
  } else {
    wait_and_copy_out(globally_used);  // the averages into .grad, as on the others
  }
  if (!rebuilt_) rebuild_in_ready_order();
  if (record) adopt_recorded_counts(table);
}

void Reducer::reset_iteration() {
  source_rank_ = 0;
  join_scale_ = 1.0;
  buckets_.reset();
  finalize_queued_ = false;
  arrivals_this_iteration_ = 0;
  arrived_.assign(names_.size(), 0);
  launched_during_backward_ = 0;
  ready_order_.clear();
  if (recording()) {
    recorded_arrivals_.assign(names_.size(), 0);
    last_arrival_.assign(names_.size(), 0);
  }
}

void Reducer::on_gradient_ready(size_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!require_sync_) return;  // no_sync(): gradients accumulate locally.
  queue_finalize();
  ++arrivals_this_iteration_;
  if (recording()) {  // Note [Static graph]: count only, reduce at the end.
    ++recorded_arrivals_[index];
    last_arrival_[index] = static_cast<int64_t>(arrivals_this_iteration_);
    return;
  }
  if (buckets_.passes_left(index) == 0) {
    if (!expected_.empty()) {
      throw InvalidArgumentError(
          base::detail::str("DistributedDataParallel(static_graph): parameter '", names_[index],
                            "' received more than the ", expected_[index],
                            " gradient(s) per backward pass that the first iteration recorded, in "
                            "synchronized iteration ",
                            stats_.synchronized_iterations + 1,
                            ": the graph changed. static_graph needs the same graph in every "
                            "iteration; construct without it when the graph changes."));
    }
    throw InvalidArgumentError(
        "DistributedDataParallel: parameter '" + names_[index] +
        "' received its gradient twice in one backward pass (a module applied "
        "twice under "
        "reentrant activation checkpointing, or several backward calls per "
        "iteration). When the "
        "graph is the same in every iteration, construct with "
        "DistributedDataParallelOptions().static_graph(true), which reduces "
        "the accumulated "
        "gradient once; otherwise call backward once per forward, or "
        "accumulate inside "
        "no_sync().");
  }
  if (!buckets_.count_pass(index)) return;  // More passes to come (static graph).
  if (!rebuilt_) ready_order_.push_back(index);
  arrived_[index] = 1;
  if (!buckets_.mark_ready(index)) return;
  fill_bucket(buckets_.bucket_of(index));
  // Every rank issues the buckets' collectives in the same order, whatever
  // order its gradients arrive in: the engine starts a bucket only when all
  // earlier ones have started.
  if (!options_.delay_allreduce()) {
    launched_during_backward_ +=
        static_cast<int>(buckets_.launch_ready_in_order([this](size_t b) { return launch(b); }));
  }
}

Work Reducer::launch(size_t bucket) {
  if (alone_) return Work();  // Note [Alone]
  comm::detail::CollectiveName name("ddp.bucket", static_cast<int64_t>(bucket));
  return hook_->reduce(*group_, hook_buckets_[bucket]);
}

void Reducer::finalize_backward() {
  try {
    finish_iteration();
  } catch (const TimeoutError& e) {
    explain_failure(e, "the gradient collectives");
  } catch (const CollectiveError& e) {
    explain_failure(e, "the gradient collectives");
  }
}

void Reducer::finish_iteration() {
  std::lock_guard<std::mutex> lock(mutex_);
  awaiting_backward_ = false;
  if (arrivals_this_iteration_ == 0) {
    // The pass reached DDP's output but no parameter (autograd::grad with
    // respect to inputs): not an iteration.
    finalize_queued_ = false;
    return;
  }
  base::detail::ScopeExit reset_at_exit([this] { reset_iteration(); });
  if (recording()) {
    finalize_recording();
    return;
  }

  const auto& parameters = buckets_.parameters();
  std::vector<size_t> unused;
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (buckets_.passes_left(i) > 0) unused.push_back(i);
  }
  if (!unused.empty() && !expected_.empty()) throw_missing_gradients(unused);
  if (!unused.empty() && !options_.find_unused_parameters()) {
    std::string all;
    for (size_t k = 0; k < unused.size() && k < 8; ++k) {
      all += (k ? ", '" : "'") + names_[unused[k]] + "'";
    }
    if (unused.size() > 8) all += ", ...";
    const std::string message = base::detail::str(
        "DistributedDataParallel: rank ", group_->rank(), ", iteration ", forwards_,
        ": parameter '", names_[unused.front()], "' received no gradient in this backward pass (",
        unused.size(), " parameter(s) in all: ", all,
        "), so its bucket can never be reduced. If some parameters are legitimately unused in some "
        "iterations, construct with DistributedDataParallelOptions().find_unused_parameters(true); "
        "otherwise make sure every parameter contributes to the loss.");
    board_.report_error(message);
    throw InvalidArgumentError(message);
  }
  for (size_t index : unused) {
    // Unused here: contribute the gradient held so far (or zero), but leave
    // .grad alone until we know whether any rank used it.
    const at::Tensor& view = views_[index];
    const at::Tensor& grad = parameters[index].grad();
    if (alone_) {
      // Note [Alone]: nothing travels.
    } else if (grad.defined() && !is_view_of(grad, view)) {
      view.copy_(grad);
    } else if (!grad.defined()) {
      view.zero_();
    }
    if (buckets_.mark_ready(index)) fill_bucket(buckets_.bucket_of(index));
  }
  buckets_.launch_rest([this](size_t b) { return launch(b); });

  std::vector<int32_t> globally_used;
  if (!expected_.empty()) {
    // Static graph: what every rank uses is known; no search.
    for (int64_t count : expected_) globally_used.push_back(count > 0 ? 1 : 0);
  } else if (options_.find_unused_parameters()) {
    globally_used = exchange_usage(unused);
  }
  wait_and_copy_out(globally_used);

  stats_.launched_during_backward = launched_during_backward_;
  ++stats_.synchronized_iterations;
  if (!rebuilt_) rebuild_in_ready_order();
}

std::vector<int32_t> Reducer::exchange_usage(const std::vector<size_t>& unused) {
  at::Tensor used = at::ones({static_cast<int64_t>(names_.size())}, at::kInt);
  for (size_t index : unused) used[index] = 0;
  if (!alone_) {
    comm::detail::CollectiveName name("ddp.unused_parameters");
    group_->all_reduce(used, ReduceOp::kMax);
  }
  ++stats_.unused_parameter_searches;
  return std::vector<int32_t>(used.data_ptr<int32_t>(), used.data_ptr<int32_t>() + used.numel());
}

// Note [Rebuilding buckets in gradient-ready order]
// After the first iteration the reducer knows the order in which gradients
// really became ready, and regroups the buckets so that each fills up as
// early as possible. Ranks may observe different orders, and every rank
// must use the same buckets, so rank 0's order is broadcast and adopted.
void Reducer::rebuild_in_ready_order() {
  rebuilt_ = true;
  const std::vector<size_t> local = rebuild_bucket_order(ready_order_, names_.size());
  std::vector<int64_t> order(local.begin(), local.end());
  at::Tensor shared = at::tensor(order, at::kLong);
  if (!alone_) {
    comm::detail::CollectiveName name("ddp.rebuild_buckets");
    group_->broadcast(shared, source_rank_);  // rank 0, or the Join's source
  }
  std::vector<size_t> adopted(order.size());
  for (size_t k = 0; k < adopted.size(); ++k) adopted[k] = shared[k].item<int64_t>();
  buckets_.rebuild(adopted);
  adopt_buckets();
  stats_.rebuilt = true;
}

}  // namespace ddp::parallel::detail

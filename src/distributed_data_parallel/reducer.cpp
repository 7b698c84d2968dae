#include "distributed_data_parallel/reducer.hpp"

#include <ATen/ATen.h>

#include "compat/torch_compat.hpp"
#include "distributed_data_parallel/bucket_assignment.hpp"
#include "ddp/errors.hpp"
#include "collective_name.hpp"

namespace ddp::detail {
namespace {

bool isViewOf(const at::Tensor& grad, const at::Tensor& slice) {
  return grad.defined() && grad.data_ptr() == slice.data_ptr();
}

BucketSettings bucketSettings(const DistributedDataParallelOptions& options) {
  const auto mib = [](double value) { return static_cast<int64_t>(value * 1024 * 1024); };
  BucketSettings settings;
  settings.first_cap_bytes = mib(options.first_bucket_cap_mb());
  settings.cap_bytes = mib(options.bucket_cap_mb());
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
      // Reverse registration order at first; the first iteration tells the
      // real order (Note [Rebuilding buckets in gradient-ready order]).
      buckets_(std::move(parameters), bucketSettings(options)) {
  adoptBuckets();
  resetIteration();
}

void Reducer::attachHooks() {
  std::weak_ptr<Reducer> weak = weak_from_this();
  buckets_.attach_hooks([weak](size_t index) {
    if (auto self = weak.lock()) self->onGradientReady(index);
  });
}

void Reducer::setRequireSync(bool value) {
  std::lock_guard<std::mutex> lock(mutex_);
  require_sync_ = value;
}

bool Reducer::requireSync() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return require_sync_;
}

ReducerStats Reducer::stats() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return stats_;
}

// Note [Gradients that alias the bucket without being views]
// With gradient_as_bucket_view, each .grad shares its bucket's memory. It is
// made with set_() rather than view(): an autograd view cannot be detached in
// place, and LibTorch 1.13's Optimizer::zero_grad() calls detach_() on every
// gradient.
at::Tensor Reducer::gradientAlias(size_t index) const {
  const at::Tensor slice = buckets_.slice(index);
  const at::Tensor& parameter = buckets_.parameters()[index];
  at::Tensor alias = at::empty({0}, slice.options());
  alias.set_(slice.storage(), slice.storage_offset(), parameter.sizes(),
             c10::contiguous_strides(parameter.sizes()));
  return alias;
}

// After the buckets were (re)built: their sizes, and with
// gradient_as_bucket_view, gradients that alias them (keeping their values),
// so that accumulation writes straight into the memory that is communicated.
void Reducer::adoptBuckets() {
  stats_.bucket_bytes = buckets_.bucket_bytes();
  if (!options_.gradient_as_bucket_view()) return;
  const auto& parameters = buckets_.parameters();
  for (size_t i = 0; i < parameters.size(); ++i) {
    at::Tensor view = buckets_.slice(i);
    at::Tensor& grad = parameters[i].mutable_grad();
    if (grad.defined()) view.copy_(grad.reshape({-1}));
    grad = gradientAlias(i);
  }
}

void Reducer::set_join_round(int source, double scale) {
  std::lock_guard<std::mutex> lock(mutex_);
  source_rank_ = source;
  join_scale_ = scale;
}

void Reducer::shadow_iteration() {
  std::lock_guard<std::mutex> lock(mutex_);
  struct ResetAtExit {
    Reducer* reducer;
    ~ResetAtExit() { reducer->resetIteration(); }
  } reset_at_exit{this};
  std::vector<size_t> all(names_.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  for (Bucket& bucket : buckets_.buckets()) bucket.flat.zero_();
  buckets_.launch_rest([this](size_t b) { return launch(b); });
  if (options_.find_unused_parameters()) exchangeUsage(all);
  for (Bucket& bucket : buckets_.buckets()) bucket.work.wait();
  if (!rebuilt_) rebuildInReadyOrder();
}

void Reducer::resetIteration() {
  source_rank_ = 0;
  join_scale_ = 1.0;
  buckets_.reset();
  finalize_queued_ = false;
  launched_during_backward_ = 0;
  ready_order_.clear();
}

void Reducer::onGradientReady(size_t index) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!require_sync_) return;  // no_sync(): gradients accumulate locally.
  if (!finalize_queued_) {
    finalize_queued_ = true;
    std::weak_ptr<Reducer> weak = weak_from_this();
    compat::queueBackwardCallback([weak] {
      if (auto self = weak.lock()) self->finalizeBackward();
    });
  }
  if (buckets_.passes_left(index) == 0) {
    throw InvalidArgumentError(
        "DistributedDataParallel: parameter '" + names_[index] +
        "' received its gradient twice in one backward pass. Reentrant backward or "
        "retain_graph with several backward calls per iteration is not supported: call "
        "backward once per forward, or accumulate inside no_sync().");
  }
  if (!rebuilt_) ready_order_.push_back(index);
  copyIntoBucket(index);
  // Every rank issues the buckets' collectives in the same order, whatever
  // order its gradients arrive in: the engine starts a bucket only when all
  // earlier ones have started.
  if (buckets_.mark_ready(index) && !options_.delay_allreduce()) {
    launched_during_backward_ +=
        static_cast<int>(buckets_.launch_ready_in_order([this](size_t b) { return launch(b); }));
  }
}

void Reducer::copyIntoBucket(size_t index) {
  at::Tensor view = buckets_.slice(index);
  at::Tensor& grad = buckets_.parameters()[index].mutable_grad();
  if (isViewOf(grad, view)) return;  // Accumulated in place already.
  if (grad.defined()) {
    view.copy_(grad.reshape({-1}));
  } else {
    view.zero_();
  }
  if (options_.gradient_as_bucket_view()) grad = gradientAlias(index);
}

Work Reducer::launch(size_t bucket) {
  detail::CollectiveName name("ddp.bucket", static_cast<int64_t>(bucket));
  return hook_->reduce(*group_, buckets_.buckets()[bucket].flat);
}

void Reducer::finalizeBackward() {
  std::lock_guard<std::mutex> lock(mutex_);
  struct ResetAtExit {
    Reducer* reducer;
    ~ResetAtExit() { reducer->resetIteration(); }
  } reset_at_exit{this};

  const auto& parameters = buckets_.parameters();
  std::vector<size_t> unused;
  for (size_t i = 0; i < parameters.size(); ++i) {
    if (buckets_.passes_left(i) > 0) unused.push_back(i);
  }
  if (!unused.empty() && !options_.find_unused_parameters()) {
    std::string all;
    for (size_t k = 0; k < unused.size() && k < 8; ++k) {
      all += (k ? ", '" : "'") + names_[unused[k]] + "'";
    }
    if (unused.size() > 8) all += ", ...";
    throw InvalidArgumentError(
        "DistributedDataParallel: parameter '" + names_[unused.front()] +
        "' received no "
        "gradient in this backward pass (" +
        std::to_string(unused.size()) + " parameter(s) in all: " + all +
        "), so its bucket can never be reduced. If some "
        "parameters are legitimately unused in some iterations, construct with "
        "DistributedDataParallelOptions().find_unused_parameters(true); otherwise make sure "
        "every parameter contributes to the loss.");
  }
  for (size_t index : unused) {
    // Unused here: contribute the gradient held so far (or zero), but leave
    // .grad alone until we know whether any rank used it.
    at::Tensor view = buckets_.slice(index);
    const at::Tensor& grad = parameters[index].grad();
    if (grad.defined() && !isViewOf(grad, view)) {
      view.copy_(grad.reshape({-1}));
    } else if (!grad.defined()) {
      view.zero_();
    }
    buckets_.mark_ready(index);
  }
  buckets_.launch_rest([this](size_t b) { return launch(b); });

  std::vector<int32_t> globally_used;
  if (options_.find_unused_parameters()) globally_used = exchangeUsage(unused);
  waitAndCopyOut(globally_used);

  stats_.launched_during_backward = launched_during_backward_;
  ++stats_.synchronized_iterations;
  if (!rebuilt_) rebuildInReadyOrder();
}

std::vector<int32_t> Reducer::exchangeUsage(const std::vector<size_t>& unused) {
  at::Tensor used = at::ones({static_cast<int64_t>(names_.size())}, at::kInt);
  for (size_t index : unused) used[index] = 0;
  detail::CollectiveName name("ddp.unused_parameters");
  group_->all_reduce(used, ReduceOp::kMax);
  return std::vector<int32_t>(used.data_ptr<int32_t>(), used.data_ptr<int32_t>() + used.numel());
}

void Reducer::waitAndCopyOut(const std::vector<int32_t>& globally_used) {
  const auto& parameters = buckets_.parameters();
  for (Bucket& bucket : buckets_.buckets()) {
    bucket.work.wait();
    if (join_scale_ != 1.0) bucket.flat.mul_(join_scale_);  // Note [Joining]
    for (size_t index : bucket.members) {
      // A parameter no rank used keeps its .grad as it was, as in PyTorch.
      if (!globally_used.empty() && globally_used[index] == 0) continue;
      at::Tensor view = buckets_.slice(index);
      at::Tensor& grad = parameters[index].mutable_grad();
      if (isViewOf(grad, view)) continue;
      if (options_.gradient_as_bucket_view()) {
        grad = gradientAlias(index);
      } else if (grad.defined()) {
        grad.copy_(view.view_as(grad));
      } else {
        grad = view.view(parameters[index].sizes()).clone();
      }
    }
  }
}

// Note [Rebuilding buckets in gradient-ready order]
// After the first iteration the reducer knows the order in which gradients
// really became ready, and regroups the buckets so that each fills up as
// early as possible. Ranks may observe different orders, and every rank
// must use the same buckets, so rank 0's order is broadcast and adopted.
void Reducer::rebuildInReadyOrder() {
  rebuilt_ = true;
  const std::vector<size_t> local = rebuild_bucket_order(ready_order_, names_.size());
  std::vector<int64_t> order(local.begin(), local.end());
  at::Tensor shared = at::tensor(order, at::kLong);
  detail::CollectiveName name("ddp.rebuild_buckets");
  group_->broadcast(shared, source_rank_);  // rank 0, or the Join's source
  std::vector<size_t> adopted(order.size());
  for (size_t k = 0; k < adopted.size(); ++k) adopted[k] = shared[k].item<int64_t>();
  buckets_.rebuild(adopted);
  adoptBuckets();
  stats_.rebuilt = true;
}

}  // namespace ddp::detail

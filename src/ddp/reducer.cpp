#include "ddp/reducer.hpp"

#include <ATen/ATen.h>

#include "compat/torch_compat.hpp"
#include "ddp/bucket_assignment.hpp"
#include "ddp/errors.hpp"
#include "horovod/timeline_recorder.hpp"

namespace ddp::detail {
namespace {

int64_t bytesOf(const at::Tensor& t) { return t.numel() * static_cast<int64_t>(t.element_size()); }

// What bucket assignment needs to know of each parameter.
std::vector<BucketInput> bucketInputsOf(const std::vector<at::Tensor>& parameters) {
  std::vector<BucketInput> inputs;
  inputs.reserve(parameters.size());
  for (const at::Tensor& p : parameters) {
    inputs.push_back({bytesOf(p), p.scalar_type(), p.device()});
  }
  return inputs;
}

bool isViewOf(const at::Tensor& grad, const at::Tensor& slice) {
  return grad.defined() && grad.data_ptr() == slice.data_ptr();
}

}  // namespace

Reducer::Reducer(std::vector<at::Tensor> parameters, std::vector<std::string> names,
                 std::shared_ptr<ProcessGroup> group, const DistributedDataParallelOptions& options)
    : parameters_(std::move(parameters)),
      names_(std::move(names)),
      group_(std::move(group)),
      options_(options),
      hook_(options.comm_hook() ? options.comm_hook() : allReduceHook()) {
  // Gradients become ready roughly in reverse order of registration (the
  // last layer first); the first iteration then tells the real order.
  buildBuckets(initialBucketOrder(parameters_.size()));
  resetIteration();
}

void Reducer::attachHooks() {
  std::weak_ptr<Reducer> weak = weak_from_this();
  for (size_t i = 0; i < parameters_.size(); ++i) {
    accumulators_.push_back(compat::addPostAccumulateGradHook(parameters_[i], [weak, i] {
      if (auto self = weak.lock()) self->onGradientReady(i);
    }));
  }
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

at::Tensor Reducer::slice(size_t index) const {
  const auto [bucket, position] = location_[index];
  return buckets_[bucket].flat.narrow(0, buckets_[bucket].offsets[position],
                                      parameters_[index].numel());
}

// Note [Gradients that alias the bucket without being views]
// With gradient_as_bucket_view, each .grad shares its bucket's memory. It is
// made with set_() rather than view(): an autograd view cannot be detached in
// place, and LibTorch 1.13's Optimizer::zero_grad() calls detach_() on every
// gradient.
at::Tensor Reducer::gradientAlias(size_t index) const {
  const auto [bucket, position] = location_[index];
  const at::Tensor& flat = buckets_[bucket].flat;
  const at::Tensor& parameter = parameters_[index];
  at::Tensor alias = at::empty({0}, flat.options());
  alias.set_(flat.storage(), flat.storage_offset() + buckets_[bucket].offsets[position],
             parameter.sizes(), c10::contiguous_strides(parameter.sizes()));
  return alias;
}

void Reducer::buildBuckets(const std::vector<size_t>& order) {
  const auto mib = [](double value) { return static_cast<int64_t>(value * 1024 * 1024); };
  auto groups = assignBuckets(bucketInputsOf(parameters_), order,
                              mib(options_.first_bucket_cap_mb()), mib(options_.bucket_cap_mb()));
  std::vector<Bucket> buckets(groups.size());
  location_.assign(parameters_.size(), {0, 0});
  stats_.bucket_bytes.clear();
  for (size_t b = 0; b < groups.size(); ++b) {
    Bucket& bucket = buckets[b];
    bucket.parameters = std::move(groups[b]);
    int64_t total = 0;
    for (size_t position = 0; position < bucket.parameters.size(); ++position) {
      const size_t index = bucket.parameters[position];
      bucket.offsets.push_back(total);
      location_[index] = {b, position};
      total += parameters_[index].numel();
    }
    const at::Tensor& first = parameters_[bucket.parameters.front()];
    bucket.flat = at::zeros({total}, first.options().requires_grad(false));
    stats_.bucket_bytes.push_back(bytesOf(bucket.flat));
  }
  buckets_ = std::move(buckets);
  if (!options_.gradient_as_bucket_view()) return;
  // Gradients become views into the buckets (keeping their values), so that
  // accumulation writes straight into the memory that is communicated.
  for (size_t i = 0; i < parameters_.size(); ++i) {
    at::Tensor view = slice(i);
    at::Tensor& grad = parameters_[i].mutable_grad();
    if (grad.defined()) view.copy_(grad.reshape({-1}));
    grad = gradientAlias(i);
  }
}

void Reducer::resetIteration() {
  ready_.assign(parameters_.size(), false);
  next_to_launch_ = 0;
  finalize_queued_ = false;
  launched_during_backward_ = 0;
  ready_order_.clear();
  for (auto& bucket : buckets_) {
    bucket.pending = bucket.parameters.size();
    bucket.work = Work();
  }
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
  if (ready_[index]) {
    throw InvalidArgumentError(
        "DistributedDataParallel: parameter '" + names_[index] +
        "' received its gradient twice in one backward pass. Reentrant backward or "
        "retain_graph with several backward calls per iteration is not supported: call "
        "backward once per forward, or accumulate inside no_sync().");
  }
  ready_[index] = true;
  if (!rebuilt_) ready_order_.push_back(index);
  copyIntoBucket(index);
  Bucket& bucket = buckets_[location_[index].first];
  if (--bucket.pending == 0) launchReadyBucketsInOrder();
}

void Reducer::copyIntoBucket(size_t index) {
  at::Tensor view = slice(index);
  at::Tensor& grad = parameters_[index].mutable_grad();
  if (isViewOf(grad, view)) return;  // Accumulated in place already.
  if (grad.defined()) {
    view.copy_(grad.reshape({-1}));
  } else {
    view.zero_();
  }
  if (options_.gradient_as_bucket_view()) grad = gradientAlias(index);
}

// Every rank must issue the buckets' collectives in the same order, whatever
// order its gradients arrive in: a bucket starts only when all earlier ones
// have.
void Reducer::launchReadyBucketsInOrder() {
  if (options_.delay_allreduce()) return;
  while (next_to_launch_ < buckets_.size() && buckets_[next_to_launch_].pending == 0) {
    launch(buckets_[next_to_launch_++]);
    ++launched_during_backward_;
  }
}

void Reducer::launch(Bucket& bucket) {
  timeline::detail::LabelScope name("ddp.bucket", &bucket - buckets_.data());
  bucket.work = hook_->reduce(*group_, bucket.flat);
}

void Reducer::finalizeBackward() {
  std::lock_guard<std::mutex> lock(mutex_);
  struct ResetAtExit {
    Reducer* reducer;
    ~ResetAtExit() { reducer->resetIteration(); }
  } reset_at_exit{this};

  std::vector<size_t> unused;
  for (size_t i = 0; i < parameters_.size(); ++i) {
    if (!ready_[i]) unused.push_back(i);
  }
  if (!unused.empty() && !options_.find_unused_parameters()) {
    std::string all;
    for (size_t k = 0; k < unused.size() && k < 8; ++k) {
      all += (k ? ", '" : "'") + names_[unused[k]] + "'";
    }
    if (unused.size() > 8) all += ", ...";
    throw InvalidArgumentError(
        "DistributedDataParallel: parameter '" + names_[unused.front()] + "' received no "
        "gradient in this backward pass (" + std::to_string(unused.size()) +
        " parameter(s) in all: " + all + "), so its bucket can never be reduced. If some "
        "parameters are legitimately unused in some iterations, construct with "
        "DistributedDataParallelOptions().find_unused_parameters(true); otherwise make sure "
        "every parameter contributes to the loss.");
  }
  for (size_t index : unused) {
    // Unused here: contribute the gradient held so far (or zero), but leave
    // .grad alone until we know whether any rank used it.
    at::Tensor view = slice(index);
    const at::Tensor& grad = parameters_[index].grad();
    if (grad.defined() && !isViewOf(grad, view)) {
      view.copy_(grad.reshape({-1}));
    } else if (!grad.defined()) {
      view.zero_();
    }
    --buckets_[location_[index].first].pending;
  }
  for (; next_to_launch_ < buckets_.size(); ++next_to_launch_) launch(buckets_[next_to_launch_]);

  std::vector<int32_t> globally_used;
  if (options_.find_unused_parameters()) globally_used = exchangeUsage(unused);
  waitAndCopyOut(globally_used);

  stats_.launched_during_backward = launched_during_backward_;
  ++stats_.synchronized_iterations;
  if (!rebuilt_) rebuildInReadyOrder();
}

std::vector<int32_t> Reducer::exchangeUsage(const std::vector<size_t>& unused) {
  at::Tensor used = at::ones({static_cast<int64_t>(parameters_.size())}, at::kInt);
  for (size_t index : unused) used[index] = 0;
  timeline::detail::LabelScope name("ddp.unused_parameters");
  group_->allReduce(used, ReduceOp::kMax);
  return std::vector<int32_t>(used.data_ptr<int32_t>(), used.data_ptr<int32_t>() + used.numel());
}

void Reducer::waitAndCopyOut(const std::vector<int32_t>& globally_used) {
  for (auto& bucket : buckets_) {
    bucket.work.wait();
    for (size_t index : bucket.parameters) {
      // A parameter no rank used keeps its .grad as it was, as in PyTorch.
      if (!globally_used.empty() && globally_used[index] == 0) continue;
      at::Tensor view = slice(index);
      at::Tensor& grad = parameters_[index].mutable_grad();
      if (isViewOf(grad, view)) continue;
      if (options_.gradient_as_bucket_view()) {
        grad = gradientAlias(index);
      } else if (grad.defined()) {
        grad.copy_(view.view_as(grad));
      } else {
        grad = view.view(parameters_[index].sizes()).clone();
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
  const std::vector<size_t> local = rebuildBucketOrder(ready_order_, parameters_.size());
  std::vector<int64_t> order(local.begin(), local.end());
  at::Tensor shared = at::tensor(order, at::kLong);
  timeline::detail::LabelScope name("ddp.rebuild_buckets");
  group_->broadcast(shared, 0);
  std::vector<size_t> adopted(order.size());
  for (size_t k = 0; k < adopted.size(); ++k) adopted[k] = shared[k].item<int64_t>();
  buildBuckets(adopted);
  stats_.rebuilt = true;
}

}  // namespace ddp::detail

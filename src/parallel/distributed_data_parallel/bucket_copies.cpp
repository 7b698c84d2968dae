// The Reducer's movement of gradients into and out of its buckets: copies
// in when a bucket is full, copies (or aliases) back after its reduction,
// and the world-size-1 path that moves nothing (Note [Alone]).

#include <ATen/ATen.h>

#include "base/compat/torch_compat.hpp"
#include "parallel/distributed_data_parallel/reducer.hpp"

namespace ddp::parallel::detail {

// Note [Gradients that alias the bucket without being views]
// With gradient_as_bucket_view, each .grad shares its bucket's memory. It is
// made with set_() rather than view(): an autograd view cannot be detached in
// place, and LibTorch 1.13's Optimizer::zero_grad() calls detach_() on every
// gradient.
at::Tensor Reducer::gradient_alias(size_t index) const {
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
// A gradient not defined yet stays so until its first reduction, as in
// PyTorch: an optimizer skips a parameter without one (a defined zero would
// still get weight decay and momentum).
//
// Note [Views made once]
// Every step reads and writes each gradient's place in its bucket; making
// those views (and the aliases) once per build of the buckets, not at each
// use, leaves in a step only the operator calls that move data (a narrow is
// three calls, a view_as two).
void Reducer::adopt_buckets() {
  stats_.bucket_bytes = buckets_.bucket_bytes();
  views_.clear();
  for (size_t i = 0; i < buckets_.parameters().size(); ++i) {
    views_.push_back(buckets_.slice(i).view(buckets_.parameters()[i].sizes()));
  }
  const auto& buckets = buckets_.buckets();
  hook_buckets_.assign(buckets.size(), GradBucket());
  for (size_t b = 0; b < buckets.size(); ++b) {
    GradBucket& view = hook_buckets_[b];
    view.index = b;
    view.buffer = buckets[b].flat;
    view.is_last = b + 1 == buckets.size();
    for (size_t index : buckets[b].members) view.gradients.push_back(views_[index]);
  }
  aliases_.clear();
  if (!options_.gradient_as_bucket_view()) return;
  const auto& parameters = buckets_.parameters();
  for (size_t i = 0; i < parameters.size(); ++i) {
    aliases_.push_back(gradient_alias(i));
    at::Tensor& grad = parameters[i].mutable_grad();
    if (!grad.defined()) continue;
    views_[i].copy_(grad);
    grad = aliases_[i];
  }
}

// Note [Alone]
// At world size 1 the average of a gradient over the ranks is the gradient:
// with the default reduction, a step needs no copy into the buckets, no
// division, no collective and no copy back, and skipping them changes no
// bit. Gradients stay where backward put them (or, with
// gradient_as_bucket_view, in the buckets they alias). A comm hook runs as
// at any world size: compressing to 16 bits changes the values even alone.
// The per-iteration checks (a gradient twice, none, the static graph's
// counts) run as before; so do the one-time collectives of construction.

// Note [Filling a bucket at once]
// Gradients are copied into a bucket when its last one is ready, all in one
// multi-tensor copy (base::compat::copy_each), and back after the reduction the
// same way, rather than one copy per gradient as each arrives: a bucket is
// launched only when full anyway, and one kernel per bucket instead of one
// per parameter is what makes DDP's added work per step small on a GPU.
void Reducer::fill_bucket(size_t b) {
  if (alone_ && !options_.gradient_as_bucket_view()) return;
  const Bucket& bucket = buckets_.buckets()[b];
  const auto& parameters = buckets_.parameters();
  std::vector<at::Tensor> destinations, sources;
  for (size_t index : bucket.members) {
    if (!arrived_[index]) continue;  // unused: placed by finish_iteration
    arrived_[index] = 0;
    const at::Tensor& view = views_[index];
    at::Tensor& grad = parameters[index].mutable_grad();
    if (is_view_of(grad, view)) continue;  // Accumulated in place already.
    if (grad.defined()) {
      destinations.push_back(view);
      sources.push_back(grad);  // kept alive past the alias below
    } else {
      view.zero_();
    }
    if (options_.gradient_as_bucket_view()) grad = aliases_[index];
  }
  base::compat::copy_each(destinations, sources);
}

void Reducer::wait_and_copy_out(const std::vector<int32_t>& globally_used) {
  if (alone_) return;  // Note [Alone]: the gradients are where they were.
  const auto& parameters = buckets_.parameters();
  std::vector<at::Tensor> destinations, sources;
  for (Bucket& bucket : buckets_.buckets()) {
    bucket.work.wait();
    if (join_scale_ != 1.0) bucket.flat.mul_(join_scale_);  // Note [Joining]
    destinations.clear();
    sources.clear();
    for (size_t index : bucket.members) {
      // A parameter no rank used keeps its .grad as it was, as in PyTorch.
      if (!globally_used.empty() && globally_used[index] == 0) continue;
      const at::Tensor& view = views_[index];
      at::Tensor& grad = parameters[index].mutable_grad();
      if (is_view_of(grad, view)) continue;
      if (options_.gradient_as_bucket_view()) {
        grad = aliases_[index];
      } else if (grad.defined()) {
        destinations.push_back(grad);
        sources.push_back(view);
      } else {
        grad = view.clone();
      }
    }
    base::compat::copy_each(destinations, sources);  // Note [Filling a bucket at once]
  }
}

}  // namespace ddp::parallel::detail

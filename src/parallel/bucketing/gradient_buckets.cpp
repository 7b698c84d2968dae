#include "parallel/bucketing/gradient_buckets.hpp"

#include <ATen/ATen.h>

#include "base/compat/torch_compat.hpp"
#include "base/str.hpp"
#include "ddp/base/errors.hpp"

namespace ddp::parallel::detail {

int64_t cap_bytes_of(double mib, const char* owner, const char* option) {
  if (!(mib > 0)) {
    throw ConfigError(base::detail::str(owner, ": ", option, " is ", mib,
                                        "; it must be a positive number of MiB (PyTorch uses 25 "
                                        "for bucket_cap_mb and 1 for a first bucket)."));
  }
  return static_cast<int64_t>(mib * 1024 * 1024);
}
namespace {

c10::ScalarType wire_type_of(const BucketSettings& settings, c10::ScalarType dtype) {
  return settings.wire_type ? settings.wire_type(dtype) : dtype;
}

}  // namespace

GradientBuckets::GradientBuckets(std::vector<at::Tensor> parameters, BucketSettings settings)
    : parameters_(std::move(parameters)), settings_(std::move(settings)) {
  rebuild(initial_bucket_order(parameters_.size()));
}

void GradientBuckets::attach_hooks(const std::function<void(size_t)>& on_accumulated) {
  for (size_t i = 0; i < parameters_.size(); ++i) {
    accumulators_.push_back(base::compat::add_post_accumulate_grad_hook(
        parameters_[i], [on_accumulated, i] { on_accumulated(i); }));
  }
}

std::vector<std::vector<size_t>> group_parameters(const std::vector<at::Tensor>& parameters,
                                                  const BucketSettings& settings,
                                                  const std::vector<size_t>& order) {
  std::vector<BucketInput> inputs;
  inputs.reserve(parameters.size());
  for (const at::Tensor& p : parameters) {
    const c10::ScalarType wire = wire_type_of(settings, p.scalar_type());
    inputs.push_back(
        {p.numel() * static_cast<int64_t>(c10::elementSize(wire)), p.scalar_type(), p.device()});
  }
  return assign_buckets(inputs, order, settings.first_cap_bytes, settings.cap_bytes,
                        settings.cap_rule);
}

void GradientBuckets::rebuild(const std::vector<size_t>& order) {
  auto groups = group_parameters(parameters_, settings_, order);
  std::vector<Bucket> buckets(groups.size());
  location_.assign(parameters_.size(), {0, 0});
  for (size_t b = 0; b < groups.size(); ++b) {
    Bucket& bucket = buckets[b];
    bucket.members = std::move(groups[b]);
    int64_t total = 0;
    for (size_t position = 0; position < bucket.members.size(); ++position) {
      const size_t index = bucket.members[position];
      bucket.offsets.push_back(total);
      location_[index] = {b, position};
      total += parameters_[index].numel();
    }
    const at::Tensor& first = parameters_[bucket.members.front()];
    bucket.flat = at::zeros(
        {total},
        first.options().dtype(wire_type_of(settings_, first.scalar_type())).requires_grad(false));
  }
  buckets_ = std::move(buckets);
  reset();
}

void GradientBuckets::reset() {
  if (passes_.empty()) {
    passes_left_.assign(parameters_.size(), settings_.passes_per_step);
  } else {
    passes_left_ = passes_;
  }
  next_to_launch_ = 0;
  for (Bucket& bucket : buckets_) {
    bucket.pending = bucket.members.size();
    bucket.work = Work();
  }
  for (size_t i = 0; i < passes_left_.size(); ++i) {
    if (passes_left_[i] == 0) --buckets_[location_[i].first].pending;
  }
}

void GradientBuckets::set_passes(std::vector<int64_t> passes) {
  passes_ = std::move(passes);
  reset();
}

bool GradientBuckets::mark_ready(size_t index) {
  passes_left_[index] = 0;
  return --buckets_[location_[index].first].pending == 0;
}

size_t GradientBuckets::launch_ready_in_order(const std::function<Work(size_t)>& launch) {
  const size_t before = next_to_launch_;
  while (next_to_launch_ < buckets_.size() && buckets_[next_to_launch_].pending == 0) {
    const size_t b = next_to_launch_++;
    buckets_[b].work = launch(b);
  }
  return next_to_launch_ - before;
}

size_t GradientBuckets::launch_rest(const std::function<Work(size_t)>& launch) {
  const size_t before = next_to_launch_;
  while (next_to_launch_ < buckets_.size()) {
    const size_t b = next_to_launch_++;
    buckets_[b].work = launch(b);
  }
  return next_to_launch_ - before;
}

at::Tensor GradientBuckets::slice(size_t index) const {
  const auto [bucket, position] = location_[index];
  return buckets_[bucket].flat.narrow(0, buckets_[bucket].offsets[position],
                                      parameters_[index].numel());
}

std::vector<int64_t> GradientBuckets::bucket_bytes() const {
  std::vector<int64_t> bytes;
  bytes.reserve(buckets_.size());
  for (const Bucket& bucket : buckets_) {
    bytes.push_back(bucket.flat.numel() * static_cast<int64_t>(bucket.flat.element_size()));
  }
  return bytes;
}

}  // namespace ddp::parallel::detail

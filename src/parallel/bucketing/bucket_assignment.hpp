#pragma once

// Internal: how the gradient-bucketing engine (gradient_buckets.hpp)
// groups parameters into buckets. Pure functions of sizes, dtypes, devices and an order (no
// tensors, no process group), so that they can be tested on their own.

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ddp::parallel::detail {

/// What bucket assignment needs to know of one parameter.
struct BucketInput {
  /// Bytes of the parameter's gradient (elements x element size).
  int64_t bytes = 0;
  /// Its dtype and device: a bucket holds gradients of one dtype on one
  /// device, since it is reduced as one flat tensor.
  c10::ScalarType dtype = c10::ScalarType::Float;
  c10::Device device = c10::Device(c10::kCPU);
};

/// How a cap closes a bucket.
enum class CapRule {
  /// A bucket closes as soon as its bytes reach the cap, so the member that
  /// crosses it stays in (PyTorch DDP's bucket_cap_mb).
  kCloseOnReaching,
  /// A bucket takes the next member only while it stays within the cap, so
  /// a member larger than the cap travels alone and a cap of 0 gives one
  /// bucket per member (Horovod's fusion threshold).
  kNeverExceed,
};

/// Groups the parameters listed in `order` (indices into `parameters`, each
/// at most once) into buckets of one dtype and device. Parameters are taken
/// in `order`, and each joins the open bucket of its (dtype, device), whose
/// cap is `first_cap_bytes` for the first bucket of each (dtype, device) and
/// `cap_bytes` for later ones, applied by `rule`. Buckets still open at the
/// end are kept. Buckets come out ordered by the position in `order` of
/// their first member (the order their first gradient is expected in), and
/// list their members in `order`. Parameters missing from `order` are in no
/// bucket.
std::vector<std::vector<size_t>> assign_buckets(const std::vector<BucketInput>& parameters,
                                                const std::vector<size_t>& order,
                                                int64_t first_cap_bytes, int64_t cap_bytes,
                                                CapRule rule = CapRule::kCloseOnReaching);

/// The order buckets are built in before the first iteration: reverse
/// registration order (count - 1, ..., 0), since gradients become ready
/// roughly from the last layer to the first.
std::vector<size_t> initial_bucket_order(size_t count);

/// The order buckets are rebuilt in after the first iteration: `ready_order`
/// (the parameters in the order their gradients became ready, each at most
/// once), then the parameters that got no gradient, in reverse registration
/// order.
std::vector<size_t> rebuild_bucket_order(const std::vector<size_t>& ready_order, size_t count);

}  // namespace ddp::parallel::detail

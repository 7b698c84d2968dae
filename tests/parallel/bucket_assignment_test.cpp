// How the gradient-bucketing engine groups parameters into buckets
// (ddp::parallel::detail::assign_buckets and the orders it is given), against bucket
// lists written out by hand.
//
// DistributedDataParallel's rule (CapRule::kCloseOnReaching): parameters are taken in the given
// order; each joins the open bucket of its (dtype, device), which closes as soon as its bytes reach
// its cap (the first-bucket cap for the first bucket of each dtype and device, the bucket cap after
// that); buckets come out ordered by the position of their first member in the order. PyTorch's
// compute_bucket_assignment_by_size closes buckets the same way (add, then compare with the cap).
// The Horovod-style optimizer's rule (CapRule::kNeverExceed) is tested last.

#include <gtest/gtest.h>

#include <vector>

#include "parallel/bucketing/bucket_assignment.hpp"

namespace ddp::parallel::detail {
namespace {

using Buckets = std::vector<std::vector<size_t>>;

BucketInput input(int64_t bytes, c10::ScalarType dtype = c10::kFloat,
                  c10::Device device = c10::Device(c10::kCPU)) {
  return BucketInput{bytes, dtype, device};
}

std::vector<BucketInput> same_kind(const std::vector<int64_t>& bytes) {
  std::vector<BucketInput> inputs;
  for (int64_t b : bytes) inputs.push_back(input(b));
  return inputs;
}

constexpr int64_t kKiB = 1024;
constexpr int64_t kMiB = 1024 * 1024;

TEST(DdpBucketAssignment, EmptyInput) {
  EXPECT_EQ(assign_buckets({}, {}, 100, 200), Buckets{});
  EXPECT_EQ(initial_bucket_order(0), std::vector<size_t>{});
  EXPECT_EQ(rebuild_bucket_order({}, 0), std::vector<size_t>{});
}

TEST(DdpBucketAssignment, OneParameter) {
  EXPECT_EQ(assign_buckets(same_kind({40}), {0}, 100, 200), (Buckets{{0}}));   // under the cap
  EXPECT_EQ(assign_buckets(same_kind({500}), {0}, 100, 200), (Buckets{{0}}));  // over it
  EXPECT_EQ(assign_buckets(same_kind({0}), {0}, 100, 200), (Buckets{{0}}));    // empty tensor
  EXPECT_EQ(initial_bucket_order(1), std::vector<size_t>{0});
}

// First cap 100, then 150, 50 bytes each, reverse registration order: the
// first bucket closes at exactly 100 bytes (two), the next at 150 (three),
// and the remainder stays a bucket of its own.
TEST(DdpBucketAssignment, BucketsCloseWhenTheyReachTheirCap) {
  const auto inputs = same_kind({50, 50, 50, 50, 50, 50});
  EXPECT_EQ(assign_buckets(inputs, {5, 4, 3, 2, 1, 0}, 100, 150),
            (Buckets{{5, 4}, {3, 2, 1}, {0}}));
  // One byte short of each cap: one more member per bucket.
  EXPECT_EQ(assign_buckets(inputs, {5, 4, 3, 2, 1, 0}, 101, 151), (Buckets{{5, 4, 3}, {2, 1, 0}}));
}

// A parameter at least as large as the cap closes its bucket at once: alone
// when the bucket was empty (0 and 3), else together with the smaller
// gradients before it (1, 2); what follows starts a new bucket.
TEST(DdpBucketAssignment, LargeParameterClosesItsBucket) {
  const auto inputs = same_kind({500, 10, 600, 700, 10});
  EXPECT_EQ(assign_buckets(inputs, {0, 1, 2, 3, 4}, 100, 100), (Buckets{{0}, {1, 2}, {3}, {4}}));
}

// Cap 0: every parameter is a bucket of its own, in order.
TEST(DdpBucketAssignment, ZeroCapGivesOneBucketPerParameter) {
  EXPECT_EQ(assign_buckets(same_kind({8, 0, 8}), {2, 1, 0}, 0, 0), (Buckets{{2}, {1}, {0}}));
}

// The first-bucket cap applies to the first bucket of each dtype: float
// and double gradients, 60 bytes each, alternating; first cap 100, then 1000.
TEST(DdpBucketAssignment, FirstBucketCapAppliesPerDtype) {
  const std::vector<BucketInput> inputs = {input(60, c10::kFloat), input(60, c10::kDouble),
                                           input(60, c10::kFloat), input(60, c10::kDouble),
                                           input(60, c10::kFloat), input(60, c10::kDouble),
                                           input(60, c10::kFloat), input(60, c10::kDouble)};
  EXPECT_EQ(assign_buckets(inputs, {0, 1, 2, 3, 4, 5, 6, 7}, 100, 1000),
            (Buckets{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  // The first cap, not the bucket cap, governs each dtype's first bucket:
  // with it at 1000 nothing closes, although the bucket cap is 100.
  EXPECT_EQ(assign_buckets(inputs, {0, 1, 2, 3, 4, 5, 6, 7}, 1000, 100),
            (Buckets{{0, 2, 4, 6}, {1, 3, 5, 7}}));
}

// A bucket holds one dtype: gradients of the same dtype share a bucket even
// when others come between them (3 joins 0 and 1 past the half-precision 2).
TEST(DdpBucketAssignment, DtypeChangesSplitBuckets) {
  const std::vector<BucketInput> inputs = {input(4, c10::kFloat), input(4, c10::kFloat),
                                           input(2, c10::kHalf), input(4, c10::kFloat),
                                           input(8, c10::kLong)};
  EXPECT_EQ(assign_buckets(inputs, {0, 1, 2, 3, 4}, 1000, 1000), (Buckets{{0, 1, 3}, {2}, {4}}));
  // Reverse order: buckets are ordered by their first member in the order.
  EXPECT_EQ(assign_buckets(inputs, {4, 3, 2, 1, 0}, 1000, 1000), (Buckets{{4}, {3, 1, 0}, {2}}));
}

// A bucket holds one device (no GPU needed: only the device's name matters).
TEST(DdpBucketAssignment, DeviceChangesSplitBuckets) {
  const c10::Device cpu(c10::kCPU);
  const c10::Device gpu0(c10::kCUDA, 0);
  const c10::Device gpu1(c10::kCUDA, 1);
  const std::vector<BucketInput> inputs = {input(4, c10::kFloat, cpu), input(4, c10::kFloat, gpu0),
                                           input(4, c10::kFloat, gpu1), input(4, c10::kFloat, gpu0),
                                           input(4, c10::kFloat, cpu)};
  EXPECT_EQ(assign_buckets(inputs, {0, 1, 2, 3, 4}, 1000, 1000), (Buckets{{0, 4}, {1, 3}, {2}}));
  // The first-bucket cap is per device too: each device's first bucket
  // closes at 4 bytes, the second ones (1 on cuda:0, 0 on cpu) stay open.
  EXPECT_EQ(assign_buckets(inputs, {4, 3, 2, 1, 0}, 4, 1000), (Buckets{{4}, {3}, {2}, {1}, {0}}));
}

// Before the first iteration the order is reverse registration order; the
// rebuild after it is the observed ready order, then the parameters that got
// no gradient in reverse registration order. Membership and bucket order
// follow the order given. Four 40-byte parameters, caps 80.
TEST(DdpBucketAssignment, OrderDecidesMembershipAndBucketOrder) {
  const auto inputs = same_kind({40, 40, 40, 40});
  EXPECT_EQ(initial_bucket_order(4), (std::vector<size_t>{3, 2, 1, 0}));
  EXPECT_EQ(assign_buckets(inputs, initial_bucket_order(4), 80, 80), (Buckets{{3, 2}, {1, 0}}));

  EXPECT_EQ(rebuild_bucket_order({1, 3, 0, 2}, 4), (std::vector<size_t>{1, 3, 0, 2}));
  EXPECT_EQ(assign_buckets(inputs, {1, 3, 0, 2}, 80, 80), (Buckets{{1, 3}, {0, 2}}));

  // Parameters 1 and 3 got no gradient: they follow, 3 before 1.
  EXPECT_EQ(rebuild_bucket_order({2, 0}, 4), (std::vector<size_t>{2, 0, 3, 1}));
  EXPECT_EQ(assign_buckets(inputs, rebuild_bucket_order({2, 0}, 4), 80, 80),
            (Buckets{{2, 0}, {3, 1}}));
  // No gradient at all: the initial order again.
  EXPECT_EQ(rebuild_bucket_order({}, 4), (std::vector<size_t>{3, 2, 1, 0}));
}

// Bucket order is by first member in the order, not by index or by when a
// bucket closed: the double bucket {0} comes last although 0 is the smallest
// index and it closed before {2} (which was still open at the end).
TEST(DdpBucketAssignment, BucketsAreOrderedByFirstMember) {
  const std::vector<BucketInput> inputs = {input(8, c10::kDouble), input(4), input(4), input(4)};
  EXPECT_EQ(assign_buckets(inputs, {3, 1, 2, 0}, 8, 8), (Buckets{{3, 1}, {2}, {0}}));
}

// Parameters left out of the order are in no bucket.
TEST(DdpBucketAssignment, ParametersMissingFromTheOrderAreLeftOut) {
  EXPECT_EQ(assign_buckets(same_kind({4, 4, 4}), {2, 0}, 1000, 1000), (Buckets{{2, 0}}));
}

// A three-layer perceptron with DDP's default caps (1 MiB first, 25 MiB
// after), in reverse registration order: the last layer's gradients and the
// second weight fill the first bucket past 1 MiB; the rest fits in one.
TEST(DdpBucketAssignment, DefaultCapsOnALayeredModel) {
  const auto inputs = same_kind({4 * kMiB, 4 * kKiB, 2 * kMiB, 2 * kKiB, 40 * kKiB, 40});
  EXPECT_EQ(assign_buckets(inputs, initial_bucket_order(6), 1 * kMiB, 25 * kMiB),
            (Buckets{{5, 4, 3, 2}, {1, 0}}));
  // A 1 MiB parameter last: it fills the first bucket alone; with 3 MiB
  // buckets after it, the second closes only when the 4 MiB weight joins.
  const auto bigger = same_kind({4 * kMiB, 4 * kKiB, 2 * kMiB, 2 * kKiB, 40 * kKiB, 40, 1 * kMiB});
  EXPECT_EQ(assign_buckets(bigger, {6, 5, 4, 3, 2, 1, 0}, 1 * kMiB, 3 * kMiB),
            (Buckets{{6}, {5, 4, 3, 2, 1, 0}}));
}

// CapRule::kNeverExceed (Horovod's fusion threshold): a bucket takes the next
// gradient only while it stays within the cap. 50-byte gradients, cap 100:
// two per bucket where kCloseOnReaching also gives two; cap 149: still two,
// where kCloseOnReaching takes three (it closes at 150, past the cap).
TEST(DdpBucketAssignment, NeverExceedKeepsBucketsWithinTheCap) {
  const auto inputs = same_kind({50, 50, 50, 50, 50, 50});
  const std::vector<size_t> order = {5, 4, 3, 2, 1, 0};
  EXPECT_EQ(assign_buckets(inputs, order, 100, 100, CapRule::kNeverExceed),
            (Buckets{{5, 4}, {3, 2}, {1, 0}}));
  EXPECT_EQ(assign_buckets(inputs, order, 149, 149, CapRule::kNeverExceed),
            (Buckets{{5, 4}, {3, 2}, {1, 0}}));
  EXPECT_EQ(assign_buckets(inputs, order, 149, 149, CapRule::kCloseOnReaching),
            (Buckets{{5, 4, 3}, {2, 1, 0}}));
}

// kNeverExceed: a gradient larger than the cap travels alone (it closes the
// bucket before it and the one it opens); a cap of 0 gives one bucket per
// gradient, empty ones included; the first cap still governs the first
// bucket of each dtype.
TEST(DdpBucketAssignment, NeverExceedSendsLargeGradientsAlone) {
  const auto inputs = same_kind({10, 500, 10, 10});
  EXPECT_EQ(assign_buckets(inputs, {0, 1, 2, 3}, 100, 100, CapRule::kNeverExceed),
            (Buckets{{0}, {1}, {2, 3}}));
  EXPECT_EQ(assign_buckets(same_kind({8, 0, 8}), {2, 1, 0}, 0, 0, CapRule::kNeverExceed),
            (Buckets{{2}, {1}, {0}}));
  EXPECT_EQ(
      assign_buckets(same_kind({10, 10, 10, 10}), {0, 1, 2, 3}, 10, 30, CapRule::kNeverExceed),
      (Buckets{{0}, {1, 2, 3}}));
}

}  // namespace
}  // namespace ddp::parallel::detail

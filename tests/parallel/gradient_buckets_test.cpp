// The gradient-bucketing engine under DistributedDataParallel and
// hvd::DistributedOptimizer (ddp::parallel::detail::GradientBuckets), on its own: real
// autograd hooks, launches recorded by a launch function instead of a
// process group, bucket contents and sizes against values written out.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <vector>

#include "parallel/bucketing/gradient_buckets.hpp"

namespace ddp::parallel::detail {
namespace {

using Members = std::vector<std::vector<size_t>>;

// Four float parameters of 2, 3, 4 and 5 elements (8, 12, 16, 20 bytes).
std::vector<at::Tensor> four_parameters() {
  std::vector<at::Tensor> parameters;
  for (int64_t n : {2, 3, 4, 5}) parameters.push_back(torch::zeros({n}, torch::requires_grad()));
  return parameters;
}

Members members_of(const GradientBuckets& engine) {
  Members members;
  for (const Bucket& bucket : engine.buckets()) members.push_back(bucket.members);
  return members;
}

BucketSettings caps(int64_t first, int64_t later, CapRule rule) {
  BucketSettings settings;
  settings.first_cap_bytes = first;
  settings.cap_bytes = later;
  settings.cap_rule = rule;
  return settings;
}

// Reverse registration order at first; each rule groups as assign_buckets
// does, and the buckets hold the wire dtype and the members' sizes.
TEST(DdpGradientBuckets, BuildsBucketsInReverseRegistrationOrder) {
  GradientBuckets ddp_like(four_parameters(), caps(20, 30, CapRule::kCloseOnReaching));
  // 20 bytes reach the first cap; 16 + 12 + 8 = 36 reach the second.
  EXPECT_EQ(members_of(ddp_like), (Members{{3}, {2, 1, 0}}));
  EXPECT_EQ(ddp_like.bucket_bytes(), (std::vector<int64_t>{20, 36}));
  EXPECT_EQ(ddp_like.bucket_of(1), 1u);

  // Never past 30: 20 | 16 + 12 | 8.
  GradientBuckets hvd_like(four_parameters(), caps(30, 30, CapRule::kNeverExceed));
  EXPECT_EQ(members_of(hvd_like), (Members{{3}, {2, 1}, {0}}));

  BucketSettings half = caps(30, 30, CapRule::kNeverExceed);
  half.wire_type = [](c10::ScalarType) { return c10::kHalf; };
  GradientBuckets compressed(four_parameters(), half);  // 4, 6, 8, 10 bytes on the wire
  EXPECT_EQ(members_of(compressed), (Members{{3, 2, 1, 0}}));
  EXPECT_EQ(compressed.buckets()[0].flat.scalar_type(), c10::kHalf);
  EXPECT_EQ(compressed.bucket_bytes(), (std::vector<int64_t>{28}));
  // Offsets follow the members' order: 3 (5 elements), 2 (4), 1 (3), 0.
  EXPECT_EQ(compressed.buckets()[0].offsets, (std::vector<int64_t>{0, 5, 9, 12}));
}

// Buckets launch strictly in bucket order: a complete bucket waits for its
// predecessors, and one completion can release several.
TEST(DdpGradientBuckets, LaunchesCompleteBucketsInBucketOrder) {
  GradientBuckets engine(four_parameters(), caps(1, 1, CapRule::kCloseOnReaching));
  ASSERT_EQ(members_of(engine), (Members{{3}, {2}, {1}, {0}}));
  std::vector<size_t> launched;
  const auto launch = [&](size_t b) {
    launched.push_back(b);
    return Work();
  };
  EXPECT_TRUE(engine.mark_ready(1));  // bucket 2 complete, bucket 0 is not
  EXPECT_EQ(engine.launch_ready_in_order(launch), 0u);
  EXPECT_TRUE(engine.mark_ready(3));  // bucket 0: it alone can go
  EXPECT_EQ(engine.launch_ready_in_order(launch), 1u);
  EXPECT_TRUE(engine.mark_ready(2));  // bucket 1, then the waiting bucket 2
  EXPECT_EQ(engine.launch_ready_in_order(launch), 2u);
  EXPECT_EQ(engine.launch_rest(launch), 1u);  // bucket 3, incomplete
  EXPECT_EQ(launched, (std::vector<size_t>{0, 1, 2, 3}));
  EXPECT_EQ(engine.launch_rest(launch), 0u);

  engine.reset();
  launched.clear();
  EXPECT_EQ(engine.launch_ready_in_order(launch), 0u);
  EXPECT_EQ(engine.launch_rest(launch), 4u);
  EXPECT_EQ(launched, (std::vector<size_t>{0, 1, 2, 3}));
}

// A bucket is complete when its last member is ready, not before.
TEST(DdpGradientBuckets, BucketCompletesWithItsLastMember) {
  GradientBuckets engine(four_parameters(), caps(1000, 1000, CapRule::kCloseOnReaching));
  ASSERT_EQ(members_of(engine), (Members{{3, 2, 1, 0}}));
  EXPECT_FALSE(engine.mark_ready(0));
  EXPECT_FALSE(engine.mark_ready(3));
  EXPECT_FALSE(engine.mark_ready(2));
  EXPECT_EQ(engine.buckets()[0].pending, 1u);
  EXPECT_TRUE(engine.mark_ready(1));
}

// passes_per_step: a gradient is ready after that many accumulations; the
// hooks fire once per accumulation of each parameter, with its index.
TEST(DdpGradientBuckets, HooksCountPassesPerParameter) {
  auto parameters = four_parameters();
  BucketSettings settings = caps(1000, 1000, CapRule::kNeverExceed);
  settings.passes_per_step = 2;
  GradientBuckets engine(parameters, settings);
  std::vector<size_t> calls;
  std::vector<size_t> ready;
  engine.attach_hooks([&](size_t index) {
    calls.push_back(index);
    if (engine.count_pass(index)) ready.push_back(index);
  });
  const auto backward = [&] {
    torch::Tensor loss = parameters[0].sum() + parameters[2].sum() * 2;
    loss.backward();
  };
  backward();
  EXPECT_EQ(engine.passes_left(0), 1);
  EXPECT_EQ(engine.passes_left(1), 2);  // unused
  EXPECT_TRUE(ready.empty());
  backward();
  std::sort(calls.begin(), calls.end());
  EXPECT_EQ(calls, (std::vector<size_t>{0, 0, 2, 2}));
  std::sort(ready.begin(), ready.end());
  EXPECT_EQ(ready, (std::vector<size_t>{0, 2}));
  EXPECT_EQ(engine.passes_left(0), 0);
  // The hooks ran after accumulation: two passes of d(sum)/dp = 1 and 2.
  EXPECT_TRUE(parameters[0].grad().equal(torch::full({2}, 2.0)));
  EXPECT_TRUE(parameters[2].grad().equal(torch::full({4}, 4.0)));
  engine.reset();
  EXPECT_EQ(engine.passes_left(0), 2);
}

// slice() is each parameter's window in its bucket; rebuild() regroups in a
// new order with zeroed buckets and a new step.
TEST(DdpGradientBuckets, SlicesAndRebuild) {
  GradientBuckets engine(four_parameters(), caps(1000, 1000, CapRule::kCloseOnReaching));
  engine.slice(2).fill_(7);
  const at::Tensor flat = engine.buckets()[0].flat;
  // Members 3 (5 elements), then 2 (4): elements 5..8 are parameter 2's.
  EXPECT_TRUE(flat.narrow(0, 5, 4).equal(torch::full({4}, 7.0)));
  EXPECT_EQ(flat.sum().item<float>(), 28.0f);
  engine.mark_ready(2);

  engine.rebuild({0, 1, 2, 3});
  EXPECT_EQ(members_of(engine), (Members{{0, 1, 2, 3}}));
  EXPECT_EQ(engine.buckets()[0].flat.sum().item<float>(), 0.0f);
  EXPECT_EQ(engine.buckets()[0].pending, 4u);
  EXPECT_EQ(engine.passes_left(2), 1);
  EXPECT_EQ(engine.slice(1).numel(), 3);
  EXPECT_EQ(engine.slice(1).storage_offset(), 2);
}

}  // namespace
}  // namespace ddp::parallel::detail

// ddprun --recovery memory with a ZeroRedundancyOptimizer, for real: three
// toy-trainer workers train with SGD and momentum as ZeRO stage 1 (beside
// DDP) or stage 2 (on the bare model), committing every 4 steps, so each
// rank's shard of the momentum is kept by it and by the next rank (Note
// [Sharded state in memory] in ddp/elastic/state.hpp). Rank 1 SIGKILLs
// itself; its replacement gets its shard from rank 2, the survivors keep
// their processes, and the job ends bit-identical to an uninterrupted ZeRO
// run of the same stage.

#include <gtest/gtest.h>

#include <regex>
#include <string>
#include <tuple>
#include <vector>

#include "elastic/recovery_job.hpp"

namespace ddp::launch {
namespace {

// ZeRO at `stage`, SGD with momentum; rank 1 SIGKILLs itself after step
// `kill_at` (0: never).
ChildSpec zero_toy_job(int stage, int kill_at) {
  return toy_job(kill_at, {}, {"--zero-stage", std::to_string(stage), "--momentum", "0.9"});
}

// (stage, step after which rank 1 dies)
class ElasticZeroRecovery : public ::testing::TestWithParam<std::tuple<int, int>> {};

TEST_P(ElasticZeroRecovery, KilledRankGetsItsShardFromItsBuddyAndTheJobEndsBitIdentically) {
  const auto [stage, kill_at] = GetParam();
  expect_replaced_alone_bit_identically([stage = stage](int at) { return zero_toy_job(stage, at); },
                                        kill_at, "stage " + std::to_string(stage));
}

INSTANTIATE_TEST_SUITE_P(Launcher, ElasticZeroRecovery,
                         ::testing::Values(std::make_tuple(1, 9), std::make_tuple(2, 9)),
                         [](const auto& info) {
                           return "Stage" + std::to_string(std::get<0>(info.param)) + "Step" +
                                  std::to_string(std::get<1>(info.param));
                         });

}  // namespace
}  // namespace ddp::launch

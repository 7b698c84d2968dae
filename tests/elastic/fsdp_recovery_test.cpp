// ddprun --recovery memory with FullyShardedDataParallel, for real: three
// toy-trainer workers train with --shard full (the Linear one unit, its 21
// parameters sharded 7 per rank) and SGD with momentum, committing every 4
// steps, so each rank's shard of the parameters and of the momentum is
// kept by it and by the next rank (Note [Sharded state in memory] in
// ddp/elastic/state.hpp). Rank 1 SIGKILLs itself; its replacement gets its
// shard from rank 2, the survivors keep their processes, and the job ends
// bit-identical to an uninterrupted FSDP run.

#include <gtest/gtest.h>

#include <string>

#include "elastic/recovery_job.hpp"

namespace ddp::launch {
namespace {

// FSDP, SGD with momentum; rank 1 SIGKILLs itself after step `kill_at` (0: never).
ChildSpec fsdp_toy_job(int kill_at) {
  return toy_job(kill_at, {}, {"--shard", "full", "--momentum", "0.9"});
}

TEST(ElasticFsdpRecovery, KilledRankGetsItsShardFromItsBuddyAndTheJobEndsBitIdentically) {
  expect_replaced_alone_bit_identically(fsdp_toy_job, /*kill_at=*/9, "FSDP");
}

// Hybrid sharding: four workers in two rows of two, each row a copy of the
// model sharded within it (Note [Replicated shards] in
// ddp/parallel/sharded_state.hpp). Every rank commits its pieces; the
// replacement of rank 1 takes them from its buddy, rank 2, and the mesh's
// groups are made anew in the new generation (Note [A mesh's groups]).
TEST(ElasticFsdpRecovery, HybridKilledRankIsReplacedAloneAndTheJobEndsBitIdentically) {
  auto hybrid_job = [](int kill_at) {
    return toy_job(kill_at, {}, {"--shard", "hybrid", "--momentum", "0.9"}, /*workers=*/4);
  };
  expect_replaced_alone_bit_identically(hybrid_job, /*kill_at=*/9, "hybrid FSDP", /*world=*/4);
}

}  // namespace
}  // namespace ddp::launch

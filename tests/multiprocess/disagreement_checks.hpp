#pragma once

// Ranks that disagree, run by ddp_test_worker ("ddp-disagree --phase P", 2
// ranks): every rank must fail within the collective timeout with a message
// naming the parameters, the ranks and the iteration (Note [Naming a
// mismatch on every rank] in src/parallel/distributed_data_parallel/mismatch_board.hpp),
// or, for the rank that ran out of iterations, finish. Phases:
//   unused-on-rank-R     rank R's third forward skips the branch, without
//                        find_unused_parameters (R = 0: the store's host)
//   fewer-iterations-on-rank-R  rank R trains 2 iterations, the other 3
//   skipped-backward     rank 1 skips the backward of its second forward
//   bucket-caps          rank 1 has another bucket_cap_mb
//   static-graph-changes-on-rank-1  with static_graph, rank 1's third
//                        forward skips the branch the first one recorded
//   zero-bucket-caps     a ZeroRedundancyOptimizer with another
//                        bucket_cap_mb on rank 1 (must fail at construction)
//   zero-stages          ... at stage 2 on rank 1, stage 1 on rank 0
//   zero-shapes          ... over a hidden layer of another width on rank 1

#include <memory>
#include <string>

#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::testing {

/// Runs `phase`; throws the error DDP (or ZeRO) raises. Returns normally on a rank
/// that finished its iterations, after printing "rank R: finished".
void run_disagreement(const std::shared_ptr<ProcessGroup>& group, const std::string& phase);

}  // namespace ddp::testing

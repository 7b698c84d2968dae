#pragma once

// A rank lost during FSDP's background save (issue 55, point 6), run by
// ddp_test_worker ("fsdp-lost-rank"), on a model of 2.1 M parameters (a
// shard of about 12 MB with AdamW's state, so that its write takes a while):
//   "save"    2 ranks: a snapshot by save(), 2 steps, then save_async();
//             rank 1 SIGKILLs itself as soon as save_async() returns, while
//             its background thread writes its shard. Rank 0's wait() must
//             fail within the collective timeout naming rank 1, and leave no
//             main file of the new snapshot.
//   "resume"  1 rank resumes: the snapshot before the loss, step 2.

#include <memory>
#include <set>
#include <string>

#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::testing {

/// Runs `phase` with snapshots under `directory`; prints each check by name
/// and returns how many failed. In "save", rank 1 never returns.
int check_fsdp_lost_rank(const std::shared_ptr<ProcessGroup>& group, const std::string& phase,
                         const std::string& directory);

namespace fsdp_lost_rank_check {
/// "save", rank 0.
inline const std::string kNamedInTime =
    "wait() throws a SnapshotError naming rank 1 and its shard within the collective timeout "
    "(+20 s on a loaded machine)";
inline const std::string kNoNewMainFile =
    "the lost save left no main file; the snapshot before it and its two shards verify";
/// "resume".
inline const std::string kResumesThePrevious =
    "one rank resumes the snapshot before the loss (step 2) and its parameters";
}  // namespace fsdp_lost_rank_check

inline std::set<std::string> fsdp_lost_rank_check_names(const std::string& phase) {
  using namespace fsdp_lost_rank_check;  // NOLINT(google-build-using-namespace)
  if (phase == "save") return {kNamedInTime, kNoNewMainFile};
  return {kResumesThePrevious};
}

}  // namespace ddp::testing

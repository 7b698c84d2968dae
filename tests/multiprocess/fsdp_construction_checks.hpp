#pragma once

// A model built under ddp::ShardedConstruction (Note [Sharded
// construction]; issue #58, point 1): never whole on any rank, equal to the
// plain build, trained as it, within its memory bound, and each mistake a
// named error. Run by ddp_test_worker's "fsdp-construction" scenario.

#include <memory>
#include <set>
#include <string>

#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::testing {

namespace fsdp_construction_check {
inline const std::string kBitEqual =
    "a model built under ShardedConstruction (blocks given to shard_as_built, a frozen one, an "
    "embedding tied to the head and a BatchNorm in the root) holds, once wrapped, the parameters "
    "and buffers of the same model built plainly from the same seed, bit for bit";
inline const std::string kTrainsAsPlain =
    "3 AdamW steps of the sharded-built model give the losses and parameters of the same steps "
    "of FullyShardedDataParallel around the plainly built model, bit for bit";
inline const std::string kPeakRss =
    "building 8 units of 8 MiB and wrapping them raises this rank's peak RSS by at most its "
    "shards (64 MiB / N) plus the largest unit and its shard (8 MiB + 8 MiB / N) plus 8 MiB, "
    "where the plain build of the same model at 2 ranks or more exceeds that bound";
inline const std::string kPeakRssAsAllocated =
    "under the allocator as the process has it (glibc's malloc, its mmap threshold its own), "
    "building 8 units of 2, 6 and 12 MiB weights and wrapping them raises this rank's peak RSS "
    "by at most its shards (160 MiB / N) plus the largest unit and its shard (20 MiB + 20 MiB / "
    "N) plus a fixed 12 MiB, leaves it at most its shards plus 12 MiB above where it was, and "
    "widens malloc's heap by at most 8 MiB (the weights are mappings of their own)";
inline const std::string kStepPeakAsAllocated =
    "under the allocator as the process has it, 3 AdamW steps of that model raise this rank's "
    "peak RSS by at most its gradients' and moments' shards (3 x 160 MiB / N), the unit "
    "running, its gradient and the unit prefetched (3 x 20 MiB), a reduced shard and above two "
    "ranks the ring's scratch chunk (20 MiB / N each), the backward's pool (LibTorch's gradient "
    "of a weight and the blocks kept: twice the largest weight, 24 MiB) and 8 MiB for the rest";
inline const std::string kSeedsDiffer =
    "a rank seeded differently before the sharded build is an InvalidArgumentError on every "
    "rank naming the unit and its values, not a model that differs between ranks";
inline const std::string kPolicyMismatch =
    "a wrap_policy that picks other modules than those given to shard_as_built is a ConfigError "
    "that says so";
inline const std::string kUnwrappedRead =
    "a parameter of a module built sharded but never wrapped is a named ConfigError when read, "
    "saying to wrap the model while the ShardedConstruction is alive";
inline const std::string kWrapAfterEnd =
    "a model wrapped after its ShardedConstruction ended is a ConfigError at the wrap naming the "
    "first built parameter and saying that the construction ended first";
}  // namespace fsdp_construction_check

inline std::set<std::string> fsdp_construction_check_names(int world_size) {
  using namespace fsdp_construction_check;
  std::set<std::string> names{kBitEqual,           kTrainsAsPlain,       kPeakRss,
                              kPeakRssAsAllocated, kStepPeakAsAllocated, kPolicyMismatch,
                              kUnwrappedRead,      kWrapAfterEnd};
  if (world_size > 1) names.insert(kSeedsDiffer);
  return names;
}

/// Runs the checks above on `group`; returns how many failed.
int check_fsdp_construction(const std::shared_ptr<ProcessGroup>& group);

}  // namespace ddp::testing

#pragma once

// The decoder-only transformer of examples/common/gpt.hpp, small, built
// under ddp::ShardedConstruction, its blocks checkpointed and sharded,
// trained against one process (issue #58, point 3). Run by
// ddp_test_worker's "fsdp-transformer" scenario.

#include <memory>
#include <set>
#include <string>

#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::testing {

namespace fsdp_transformer_check {
inline const std::string kFp32 =
    "the transformer built sharded, its blocks checkpointed FSDP units, trains 3 AdamW steps "
    "to the parameters of one process on every rank's batch, to 1e-5";
inline const std::string kBf16 =
    "under param_dtype bf16 it trains 3 AdamW steps to the parameters of one process that runs "
    "a bf16 copy refreshed from fp32 masters, within bf16's precision (1e-2 + 2^-6 |x|)";
}  // namespace fsdp_transformer_check

inline std::set<std::string> fsdp_transformer_check_names() {
  return {fsdp_transformer_check::kFp32, fsdp_transformer_check::kBf16};
}

/// Runs the checks above on `group`; returns how many failed.
int check_fsdp_transformer(const std::shared_ptr<ProcessGroup>& group);

}  // namespace ddp::testing

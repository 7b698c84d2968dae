#pragma once

// Internal: FullyShardedDataParallelOptions checked against each other and
// the wrapper's group, and described for the ranks' agreement.

#include <memory>
#include <string>

#include "ddp/comm/process_group_fwd.hpp"
#include "ddp/parallel/fully_sharded_data_parallel.hpp"

namespace ddp::parallel::detail {

/// \throws ConfigError naming the first option out of range (prefetch,
///   param_dtype), a mesh over another group than `group`, or
///   reshard_after_forward_mesh beside an option that makes it do nothing.
void check_options(const FullyShardedDataParallelOptions& options,
                   const std::shared_ptr<ProcessGroup>& group);

/// The options every rank must agree on, as one line.
std::string describe_options(const FullyShardedDataParallelOptions& options);

}  // namespace ddp::parallel::detail

#pragma once

// Internal: checking at construction that every rank holds the same model
// and the same collective pattern (DistributedDataParallel,
// ZeroRedundancyOptimizer, hvd::broadcast_parameters), so that a rank that
// differs is named on every rank instead of a later collective timing out.

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::parallel::detail {

/// "name dtype [d0, d1, ...]" for each named tensor, in order.
std::vector<std::string> describe_tensors(const std::vector<std::string>& names,
                                          const std::vector<at::Tensor>& tensors);

/// Checks that every rank has the same descriptions (one all-gather, named
/// `collective`, a string literal). Otherwise throws InvalidArgumentError on
/// every rank: "`who`: the `what` differ across ranks at #i: rank 0 has
/// '...', rank r has '...' (...)", naming which ranks differ, then `advice`.
/// Does nothing in a group of one.
void verify_same_across_ranks(ProcessGroup& group, const std::vector<std::string>& descriptions,
                              const char* who, const std::string& what, const std::string& advice,
                              const char* collective = "ddp.verify_model");

}  // namespace ddp::parallel::detail

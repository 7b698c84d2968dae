#pragma once

// Internal: making a module identical on every rank before training.

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::parallel::detail {

/// "name dtype [d0, d1, ...]" for each named tensor, in order.
std::vector<std::string> describe_tensors(const std::vector<std::string>& names,
                                          const std::vector<at::Tensor>& tensors);

/// Checks that every rank has the same descriptions (names, dtypes and
/// shapes, in order). Otherwise throws InvalidArgumentError on every rank,
/// naming the first entry that differs and which ranks differ, then
/// `advice`.
void verify_same_across_ranks(
    ProcessGroup& group, const std::vector<std::string>& descriptions, const std::string& what,
    const std::string& advice = "Every rank must build the same model before wrapping it.");

}  // namespace ddp::parallel::detail

#pragma once

// Memory helpers shared by the benchmarks (header-only): the bytes a rank
// holds in tensors, the process's resident set, the largest over the ranks.

#include <torch/torch.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "common/peak_rss.hpp"  // tests/common
#include "ddp/comm/process_group.hpp"

namespace ddp_bench {

/// Bytes of the distinct storages of `tensors` (a view counts once).
inline int64_t storage_bytes(const std::vector<at::Tensor>& tensors) {
  std::map<const void*, int64_t> seen;
  for (const auto& t : tensors) {
    if (t.defined() && t.has_storage() && t.storage().nbytes() > 0) {
      seen[t.storage().data()] = static_cast<int64_t>(t.storage().nbytes());
    }
  }
  int64_t bytes = 0;
  for (const auto& [pointer, size] : seen) bytes += size;
  return bytes;
}

/// Parameters, their gradients and AdamW's state tensors.
inline std::vector<at::Tensor> held_tensors(const std::vector<at::Tensor>& parameters,
                                            torch::optim::Optimizer& optimizer) {
  std::vector<at::Tensor> tensors = parameters;
  for (const auto& p : parameters) tensors.push_back(p.grad());
  for (auto& entry : optimizer.state()) {
    auto& state = static_cast<torch::optim::AdamWParamState&>(*entry.second);
    tensors.push_back(state.exp_avg());
    tensors.push_back(state.exp_avg_sq());
  }
  return tensors;
}

/// `value`'s largest over the ranks of `group` (a collective).
inline int64_t largest_across_ranks(int64_t value, ddp::ProcessGroup& group) {
  at::Tensor t = torch::tensor({value}, torch::kLong);
  group.all_reduce(t, ddp::ReduceOp::kMax);
  return t.item<int64_t>();
}

// The resident set and its peak, read as the tests read them.
using ddp::testing::reset_peak_rss;
using ddp::testing::status_bytes;

}  // namespace ddp_bench

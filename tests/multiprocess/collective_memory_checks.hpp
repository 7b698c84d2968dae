#pragma once

// What a large all-gather and reduce-scatter hold beyond their input and
// output (Note [Gloo collectives without a full-size copy]; issue #58: for
// FSDP each such buffer is a unit-sized one beside the unit). Run by
// ddp_test_worker's "collective-memory" scenario, float32, 16 MiB chunks.

#include <set>
#include <string>

#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::testing {

namespace collective_memory_check {
inline const std::string kAllGather =
    "an all-gather of 16 MiB per rank raises the peak RSS by at most 2 MiB beyond its input and "
    "output (no staging copy of the output)";
inline const std::string kReduceScatter =
    "a reduce-scatter of N x 16 MiB raises the peak RSS by at most one chunk of 16 MiB from 3 "
    "ranks on and 2 MiB beyond its input and output (no receive buffer of the input's size), and "
    "its sum is right";
}  // namespace collective_memory_check

inline std::set<std::string> collective_memory_check_names() {
  return {collective_memory_check::kAllGather, collective_memory_check::kReduceScatter};
}

/// Runs both checks on `group`; returns how many failed.
int check_collective_memory(ProcessGroup& group);

}  // namespace ddp::testing

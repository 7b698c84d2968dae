#pragma once

// Internal: sending bytes (text, serialized state) through a process group,
// whose collectives carry only numeric tensors.
//
// Note [Bytes through a collective]
// Bytes travel packed four to an int32 element, zero-padded, after their
// length (an int64): a broadcast is two collectives, an all-gather two (the
// lengths, then every rank's bytes padded to the longest). Every backend
// carries int32 and int64, and no element is reinterpreted across ranks
// with different byte orders: all ranks of a job share one architecture.

#include <string>
#include <utility>
#include <vector>

#include "ddp/comm/process_group_fwd.hpp"

namespace ddp::comm::detail {

/// `bytes` from `root` on every rank (other ranks' argument is ignored).
std::string broadcast_bytes(ProcessGroup& group, const std::string& bytes, int root);

/// Every rank's `bytes`, indexed by rank, on every rank.
std::vector<std::string> all_gather_bytes(ProcessGroup& group, const std::string& bytes);

/// How a collective step that may fail on some ranks ended, on every rank:
/// the lowest rank whose `failure` (its error's message; empty when it
/// succeeded) is not empty, and that message; {-1, ""} when every rank
/// succeeded. One all_gather_bytes.
std::pair<int, std::string> first_failure(ProcessGroup& group, const std::string& failure);

}  // namespace ddp::comm::detail

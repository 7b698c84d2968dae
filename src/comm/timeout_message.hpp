#pragma once

// Internal: the one message every backend gives when a collective times out.

#include <chrono>
#include <string>

namespace ddp::comm::detail {

/// Note [One timeout message]
/// A collective that times out says the same things on every backend (gloo,
/// nccl, shm, hierarchical) and in every code path (a peer never arrived, or
/// arrived and stalled inside the collective):
///
///   <what> did not finish within <timeout> ms: rank(s) <missing> did not
///   reach it. <advice>
///
/// `what` names the backend, the collective, its size and dtype, this rank
/// and the world size (CollectiveInfo::describe()). `missing` lists the job
/// ranks that did not arrive, where the backend knows them; otherwise
/// `unknown_why` says in parentheses why they are not named, e.g. what the
/// backend said (its first line).
/// Tests and users match on these fragments, so they change here or nowhere;
/// the error's type (TimeoutError), not this text, is what classifies it.
std::string timeout_message(const std::string& what, std::chrono::milliseconds timeout,
                            const std::string& missing, const std::string& unknown_why = "");

}  // namespace ddp::comm::detail

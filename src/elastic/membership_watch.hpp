#pragma once

// Internal: run()'s watch, at each commit, for a job that ddprun re-formed
// while a generation trained (Note [A node joins in memory] in
// ddp/elastic/run.hpp).

#include "ddp/comm/process_group_fwd.hpp"
#include "ddp/elastic/state.hpp"

namespace ddp::elastic::detail {

class Generations;

/// While it lives, every State::commit() of `state` ends with a check: rank
/// 0 of `group` asks the recovery store for its newest generation and
/// broadcasts the answer, so that every rank leaves at the same commit.
/// The check throws MembershipChange when the launcher started a newer
/// generation than `generations`' current one, and RendezvousError, on
/// every rank, when rank 0 lost the store.
class MembershipWatch {
 public:
  MembershipWatch(State& state, ProcessGroup& group, Generations& generations);
  ~MembershipWatch();
  MembershipWatch(const MembershipWatch&) = delete;
  MembershipWatch& operator=(const MembershipWatch&) = delete;

 private:
  State& state_;
};

}  // namespace ddp::elastic::detail

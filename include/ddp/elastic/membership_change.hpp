#pragma once

/// \file membership_change.hpp
/// What State::commit() throws inside run() when the launcher re-formed the
/// job while it trained (Note [A node joins in memory] in
/// ddp/elastic/run.hpp): Horovod Elastic's HostsUpdatedInterrupt.

#include <cstdint>
#include <stdexcept>
#include <string>

namespace ddp::elastic {

/// Thrown by State::commit() in run()'s training function, on every rank of
/// the generation at the same commit, when ddprun has started a newer
/// generation (a node joined the job). run() catches it and continues in the
/// new generation from that commit. It is no ddp::Error, since it ends no
/// program: a training function that catches exceptions must let it through.
class MembershipChange : public std::runtime_error {
 public:
  MembershipChange(int generation, int newest, int64_t commit)
      : std::runtime_error("ddprun started generation " + std::to_string(newest) +
                           " (the job re-formed) while generation " + std::to_string(generation) +
                           " trained; it continues from commit " + std::to_string(commit)),
        newest_(newest),
        commit_(commit) {}

  /// The generation the launcher started.
  int newest() const noexcept { return newest_; }
  /// The commit this rank continues from.
  int64_t commit() const noexcept { return commit_; }

 private:
  int newest_;
  int64_t commit_;
};

}  // namespace ddp::elastic

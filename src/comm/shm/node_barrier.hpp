#pragma once

// Internal: the barrier the ranks of a node meet at inside shared memory.

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ddp::comm::shm {

/// One rank's line in the segment's control area (own cache lines, so that
/// ranks polling each other's counters never contend on a line).
struct alignas(128) RankControl {
  /// Barriers this rank has reached since the group started.
  std::atomic<uint64_t> arrived;
  /// The process id and pid namespace of the rank, so that peers can tell a
  /// dead rank from a slow one.
  std::atomic<int64_t> pid;
  std::atomic<uint64_t> pid_namespace;
  /// What the rank's current and previous collectives are (kind, dtype, op,
  /// size, root), compared by every rank after the first barrier of each.
  std::atomic<uint64_t> stamps[2][4];
  /// Set when the rank's communicator is destroyed (its process stops
  /// using the group, after an error or at the end): it reaches no barrier
  /// again, and a peer waiting for it fails at once instead of at its
  /// deadline (a subgroup's peer that left for the next generation of an
  /// elastic job, its process alive).
  std::atomic<uint32_t> left;
};

/// The word sleeping ranks wait on (a futex), and how many sleep.
struct alignas(128) WakeWord {
  std::atomic<uint32_t> generation;
  std::atomic<uint32_t> sleepers;
};

static_assert(std::atomic<uint64_t>::is_always_lock_free, "shared atomics must be lock-free");
static_assert(std::atomic<uint32_t>::is_always_lock_free, "shared atomics must be lock-free");

/// Waits until every rank of the node has reached the same barrier, spinning
/// briefly and then sleeping on a futex. Fails with TimeoutError when the
/// deadline passes and with CollectiveError as soon as a peer's process is
/// gone or has left the group (RankControl::left), naming the ranks that did
/// not arrive.
class NodeBarrier {
 public:
  /// `global_ranks[i]` is the job rank of the node's i-th rank (for messages).
  NodeBarrier(RankControl* ranks, WakeWord* wake, int rank, std::vector<int> global_ranks);

  /// Arrives and waits until `deadline`. `describe` names the collective and
  /// `timeout` is the collective timeout the deadline came from, for the
  /// error message (Note [One timeout message]).
  void arrive_and_wait(std::chrono::steady_clock::time_point deadline,
                       const std::function<std::string()>& describe,
                       std::chrono::milliseconds timeout);

  /// Barriers passed so far (the same number on every rank).
  uint64_t count() const noexcept { return count_; }

  /// Marks this rank as gone for good and wakes the peers waiting for it.
  void leave();

 private:
  bool everyone_reached(uint64_t target) const;
  std::string missing_ranks(uint64_t target) const;
  int dead_rank(uint64_t target) const;
  int left_rank(uint64_t target) const;

  RankControl* ranks_;
  WakeWord* wake_;
  int rank_;
  int size_;
  std::vector<int> global_ranks_;
  uint64_t count_ = 0;
};

/// This process's pid namespace (inode of /proc/self/ns/pid; 0 if unknown).
uint64_t current_pid_namespace();

}  // namespace ddp::comm::shm

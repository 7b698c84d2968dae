#pragma once

// Internal: collectives among the ranks of one node through a shared-memory
// segment. Synchronous: each call returns when this rank's part is done. One
// thread per communicator (the process group's worker) calls it.

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "base/compat/torch_compat.hpp"
#include "comm/shm/node_barrier.hpp"
#include "comm/shm/reduce_kernels.hpp"
#include "comm/shm/segment.hpp"

namespace ddp::comm::shm {

/// How the communicator is laid out and how long it may wait.
struct CommunicatorOptions {
  /// Index of this rank among the node's ranks.
  int rank = 0;
  /// Job ranks of the node's ranks, in node order (its size is the size).
  std::vector<int> global_ranks{0};
  /// The longest a collective may take.
  std::chrono::milliseconds timeout{std::chrono::minutes(30)};
  /// Bytes of each of a rank's two staging slots, at most (local rank 0
  /// shrinks them to fit /dev/shm and the others follow it).
  size_t slot_bytes = size_t{4} << 20;
};

/// Names the collective in progress, for error messages (built lazily).
using Describe = std::function<std::string()>;

/// Collectives over one shared-memory segment; see Note [Rounds through
/// double-buffered slots] in communicator.cpp.
class Communicator {
 public:
  /// Meets the node's other ranks through `store` (keys under the store's
  /// own prefix), creates (rank 0) or maps the segment.
  /// \throws RendezvousError when a rank does not map it in time,
  ///   BackendUnavailableError when shared memory cannot be had.
  Communicator(c10d::Store& store, CommunicatorOptions options);
  /// Leaves the group: a peer waiting for this rank in a collective it
  /// never reaches fails at once (RankControl::left).
  ~Communicator();
  Communicator(const Communicator&) = delete;
  Communicator& operator=(const Communicator&) = delete;

  int rank() const noexcept { return options_.rank; }
  int size() const noexcept { return static_cast<int>(options_.global_ranks.size()); }

  /// Reduces `n` elements at `data` across the node in place.
  void all_reduce(void* data, int64_t n, ElementType type, Combine combine, bool average,
                  const Describe& describe);
  /// Copies `bytes` at `data` from node rank `root` to every rank.
  void broadcast(void* data, int64_t bytes, int root, const Describe& describe);
  /// Concatenates every rank's `bytes` at `input` into `output`, by node rank.
  void all_gather(void* output, const void* input, int64_t bytes, const Describe& describe);
  /// Reduces `input` (size() chunks of `n` elements) and leaves chunk
  /// rank() of the result in `output`.
  void reduce_scatter(void* output, const void* input, int64_t n, ElementType type, Combine combine,
                      bool average, const Describe& describe);
  /// Returns once every rank of the node has called it.
  void barrier(const Describe& describe);

 private:
  struct Stamp {
    uint64_t kind, type_and_op, count, root;
  };
  void begin(const Stamp& stamp);
  void meet(const Describe& describe);
  void check_stamps(const Describe& describe);
  char* slot(int rank, uint64_t round) const;

  CommunicatorOptions options_;
  Segment segment_;
  RankControl* controls_ = nullptr;
  WakeWord* wake_ = nullptr;
  char* data_ = nullptr;
  std::optional<NodeBarrier> barrier_;
  uint64_t rounds_ = 0;       // Rounds done; picks the staging slot.
  uint64_t collectives_ = 0;  // Collectives begun; picks the stamp.
  bool first_meeting_ = false;
  Stamp stamp_{};
  std::chrono::steady_clock::time_point deadline_;
};

}  // namespace ddp::comm::shm

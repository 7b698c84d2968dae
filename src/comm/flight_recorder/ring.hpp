#pragma once

// Internal: the flight recorder's ring of the last kCapacity collectives,
// in memory or mapped to a file (Note [The ring outlives its process] in
// ddp/comm/flight_recorder.hpp).
//
// Note [The ring's file]
// A 64-byte header (magic "DDPFR01\0", capacity, rank, world size, pid,
// slots handed out) and kCapacity slots of 192 bytes, native byte order,
// fixed size: a reader maps nothing and trusts nothing, it reads the bytes
// and checks the magic, the capacity and the size. Slot i holds the
// collective numbered `ticket` with ticket % capacity == i; a writer zeroes
// the slot's ticket first and stores it last (release), so a reader in
// another process that sees a zero ticket skips a slot being written. The
// state and duration are updated in place when the collective ends, only if
// the slot still holds that ticket (64 newer collectives may have reused it).

#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ddp/comm/flight_recorder.hpp"

namespace ddp::comm::flight_recorder::detail {

struct RingHeader;
struct RingSlot;

/// The process's ring.
class Ring {
 public:
  /// The process's ring, in anonymous memory until map_to_file().
  static Ring& get();

  /// Moves the ring into `path` (created or truncated, mode 0600), keeping
  /// what it holds, and labels it with `rank` and `world_size`. Only the
  /// first call with a path maps; later calls only relabel.
  /// \throws IoError naming the path and the reason.
  void map_to_file(const std::string& path, int rank, int world_size);
  /// Labels the ring (a ring in memory, or one mapped already).
  void set_rank(int rank, int world_size);
  int rank() const;

  /// Records a collective being issued; returns its ticket for finish().
  uint64_t begin(const Entry& entry);
  /// Sets the state and duration of ticket's collective, if still held.
  void finish(uint64_t ticket, State state, double duration) noexcept;
  /// What the ring holds, oldest first.
  std::vector<Entry> entries() const;

 private:
  Ring();
  RingHeader* header() const;
  RingSlot* slot(uint64_t ticket) const;

  mutable std::mutex mutex_;
  char* memory_ = nullptr;  // header, then the slots
  bool mapped_to_file_ = false;
};

/// The bytes of a ring file, as read_file() parses them.
std::optional<Record> parse_ring(const std::string& bytes);

}  // namespace ddp::comm::flight_recorder::detail

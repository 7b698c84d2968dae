#pragma once

// Internal: one POSIX shared-memory segment, mapped by every rank of a node.
//
// Note [Shared-memory segments never outlive their job]
// The creator (local rank 0) makes the segment under a fresh name that
// carries its process id, the others open and map it, and the creator
// unlinks the name as soon as every rank has mapped it. From then on the
// memory is reachable only through the mappings, so the kernel frees it when
// the last rank exits, however it exits. A creator killed inside the short
// window between creating and unlinking leaves a name behind; the next
// creator on the machine removes every ddp segment whose creator process no
// longer exists (sweep_stale_segments), so leftovers never accumulate and a
// restarted run never opens a stale segment (its names are new).

#include <cstddef>
#include <string>

namespace ddp::comm::shm {

/// A mapped shared-memory segment. Move-only; unmaps on destruction.
class Segment {
 public:
  /// Creates and maps a zero-filled segment of `bytes` under `name` (which
  /// must start with '/'), failing if the name exists.
  static Segment create(const std::string& name, size_t bytes);
  /// Opens and maps an existing segment of `bytes` under `name`.
  static Segment open(const std::string& name, size_t bytes);

  Segment() = default;
  Segment(Segment&& other) noexcept;
  Segment& operator=(Segment&& other) noexcept;
  Segment(const Segment&) = delete;
  Segment& operator=(const Segment&) = delete;
  ~Segment();

  /// Removes the segment's name (idempotent); the mapping stays valid.
  void unlink();

  char* data() const noexcept { return data_; }
  size_t size() const noexcept { return size_; }
  const std::string& name() const noexcept { return name_; }

 private:
  Segment(std::string name, char* data, size_t size, bool owner);

  std::string name_;
  char* data_ = nullptr;
  size_t size_ = 0;
  bool owner_ = false;  // Unlinks the name on destruction if still linked.
};

/// The prefix of every segment name ddp creates ("/ddp-shm-").
const char* segment_name_prefix() noexcept;

/// A new segment name for this process: prefix, process id, random suffix.
std::string fresh_segment_name();

/// Unlinks every ddp segment in `directory` (normally /dev/shm) whose
/// creator process no longer exists; returns how many were removed.
int sweep_stale_segments(const std::string& directory = "/dev/shm");

}  // namespace ddp::comm::shm

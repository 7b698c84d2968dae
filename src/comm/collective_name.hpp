#pragma once

// Internal: names for the collectives a thread issues ("ddp.bucket 3",
// "hvd.broadcast_parameters"), set by the code that issues them and read by
// whatever observes collectives (the timeline's and the flight recorder's
// observers, ddp/comm/collective_observer.hpp). ddp sets names and never
// looks at who reads them.
//
// Note [Fallback names]
// A generic helper (broadcast_tensors) cannot know what it is broadcasting
// for. Its name is a fallback: it names a collective only when no other
// name is active, so hvd::broadcast_parameters' name wins over it while
// DistributedDataParallel's own broadcasts still get a name.

#include <cstdint>
#include <optional>
#include <string>

namespace ddp::comm::detail {

/// Names the collectives this thread issues while alive, without
/// allocating: "label index" (or "label" when index is negative). `label`
/// must outlive the scope (a string literal). The innermost non-fallback
/// name wins (Note [Fallback names]).
class CollectiveName {
 public:
  explicit CollectiveName(const char* label, int64_t index = -1, bool fallback = false);
  ~CollectiveName();
  CollectiveName(const CollectiveName&) = delete;
  CollectiveName& operator=(const CollectiveName&) = delete;
};

/// Pushes `text` (which must outlive the matching pop) as this thread's
/// innermost name; for timeline::NameScope, whose string it owns.
void push_collective_name(const std::string* text);
/// Pops the innermost name pushed by push_collective_name().
void pop_collective_name() noexcept;

/// The name this thread's scopes give a collective issued now; none
/// outside every scope.
std::optional<std::string> current_collective_name();

}  // namespace ddp::comm::detail

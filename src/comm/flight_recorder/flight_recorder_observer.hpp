#pragma once

// Internal: the flight recorder as a collective observer (Note [Observing
// collectives] in ddp/comm/process_group.hpp), which ddp::init() adds to every
// group it makes: each collective takes a slot of the process's ring
// (comm/flight_recorder/ring.hpp), which its end completes; when a wait on one
// times out, it prints the ring to stderr. The backends know nothing of it.

#include <atomic>
#include <cstdint>
#include <memory>

#include "ddp/comm/collective_observer.hpp"
#include "ddp/comm/environment.hpp"

namespace ddp::comm::flight_recorder::detail {

/// Maps the process's ring to the file DDP_FLIGHT_RECORDER_FILE names in
/// `env`, if any, and labels it with `rank` (init() calls it).
/// \throws IoError when the file cannot be created.
void record_to_file_from_environment(const EnvironmentMap& env, int rank, int world_size);

/// Records the collectives of one group in the process's ring, numbered
/// 1, 2, ... in the order issued.
class FlightRecorderObserver final : public CollectiveObserver {
 public:
  /// An observer for the next group: group 0 for the first made.
  FlightRecorderObserver();

  std::unique_ptr<ObservedCollective> on_started(const CollectiveFacts& facts) override;

 private:
  int32_t group_index_;
  std::atomic<int64_t> issued_{0};
};

}  // namespace ddp::comm::flight_recorder::detail

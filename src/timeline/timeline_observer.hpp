#pragma once

// Internal: the timeline as a collective observer.
//
// Note [The timeline as an observer]
// The timeline watches collectives from outside the backends: it registers
// an observer factory with ddp::comm (Note [Parts attach observers through a
// registry] in ddp/comm/observer_factory.hpp), so that init() adds its observer
// to every group it makes, and timeline::recorded() adds it to a group made
// otherwise. The recorder is the process's, so one observer serves every
// group. While nothing is recorded, on_started() costs one atomic load and
// returns null: nothing follows the collective's Work. While a timeline is
// recorded, it returns a PendingEvent that holds the event's lane; the
// event is written when the collective ends (Note [When a collective ends]
// in ddp/comm/collective_observer.hpp). The backends, DistributedDataParallel and
// the Horovod-style optimizer know nothing of it; they only name what they
// issue (comm/collective_name.hpp). A collective is recorded once however many
// backends it passes through (`auto` hands it to Gloo or NCCL, the
// hierarchical backend to its leaders' Gloo), because only the group the
// caller holds has the observer: no thread-local call depth is needed, and
// an backend's worker thread needs no special care.

#include <memory>

#include "ddp/comm/collective_observer.hpp"
#include "ddp/comm/environment.hpp"

namespace ddp::timeline::detail {

/// Starts an event for the collective of `facts`, named by the current
/// collective name; null when no timeline is recorded (timeline.cpp).
std::unique_ptr<ObservedCollective> begin_event(const CollectiveFacts& facts);

/// Starts the timeline named by DDP_TIMELINE in `env`, as `rank`, the first
/// time it is called in the process; later calls do nothing.
/// \throws IoError when the file cannot be created.
void start_from_environment_once(const EnvironmentMap& env, int rank);

/// Records the collectives of the groups it observes while a timeline is
/// recorded (Note [The timeline as an observer]).
class TimelineObserver final : public CollectiveObserver {
 public:
  /// The one observer of every recorded group.
  static const std::shared_ptr<TimelineObserver>& get();

  std::unique_ptr<ObservedCollective> on_started(const CollectiveFacts& facts) override;
};

}  // namespace ddp::timeline::detail

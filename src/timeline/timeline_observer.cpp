#include "timeline/timeline_observer.hpp"

#include "ddp/base/errors.hpp"
#include "ddp/comm/observer_factory.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/timeline/timeline.hpp"

namespace ddp::timeline {
namespace detail {
namespace {

// What init() adds to each group (Note [Parts attach observers through a
// registry]): DDP_TIMELINE starts the timeline at the first init().
std::shared_ptr<CollectiveObserver> observer_for_init(ProcessGroup& group,
                                                      const EnvironmentMap& env) {
  start_from_environment_once(env, group.rank());
  return TimelineObserver::get();
}

}  // namespace

const std::shared_ptr<TimelineObserver>& TimelineObserver::get() {
  // Never destroyed: Works (and so observations) may end during static
  // destruction (Note [The recorder outlives everything] in timeline.cpp).
  static const auto* observer =
      new std::shared_ptr<TimelineObserver>(std::make_shared<TimelineObserver>());
  return *observer;
}

std::unique_ptr<ObservedCollective> TimelineObserver::on_started(const CollectiveFacts& facts) {
  if (!recording()) return nullptr;
  return begin_event(facts);
}

}  // namespace detail

std::shared_ptr<ProcessGroup> recorded(std::shared_ptr<ProcessGroup> group) {
  if (!group) {
    throw InvalidArgumentError(
        "timeline::recorded: the group is null; pass the group that "
        "ddp::init() or a backend returned.");
  }
  const std::shared_ptr<detail::TimelineObserver>& observer = detail::TimelineObserver::get();
  for (const auto& attached : group->observers()) {
    if (attached == observer) return group;
  }
  group->add_observer(observer);
  return group;
}

}  // namespace ddp::timeline

// The registration, named by the library's link interface so that a static
// link keeps it (src/timeline/sources.cmake).
extern "C" const bool ddp_timeline_observer_registered = [] {
  ddp::register_observer_factory(ddp::timeline::detail::observer_for_init);
  return true;
}();

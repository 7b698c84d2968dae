#pragma once

/// \file observer_factory.hpp
/// The observers ddp::init() attaches to every group it makes, beside the
/// flight recorder's: the timeline registers its own here, and a program may
/// register one for statistics of its own.
///
/// Note [Parts attach observers through a registry]
/// ddp::init() is ddp::comm's; the timeline is a part that depends on
/// ddp::comm, so init() cannot name it. Yet `DDP_TIMELINE` must work with no
/// code: the first init() of a process starts the timeline, and every group
/// init() returns is recorded. So ddp::comm keeps a list of factories, which
/// init() runs on each group it made, and the timeline registers its factory
/// when the library is loaded (a static initializer in
/// src/timeline/timeline_observer.cpp), as c10d's backends register
/// themselves by name. The alternative, observers passed through
/// InitOptions, would need the program to ask for the timeline, which
/// `DDP_TIMELINE` exists to avoid. A static library keeps only the objects a
/// program references, so libddp.a's link interface names the timeline's
/// registration (`-u`, src/timeline/sources.cmake): whatever links ddp::ddp
/// gets it, as a shared library would give it.

#include <functional>
#include <memory>
#include <vector>

#include "ddp/comm/collective_observer.hpp"
#include "ddp/comm/environment.hpp"

namespace ddp::comm {

class ProcessGroup;

/// Makes the observer that ddp::init() adds to `group`, a group it has just
/// made from `env` (the environment it read); null adds none. It may also
/// act on the environment (the timeline starts recording when
/// `DDP_TIMELINE` is set), and its exceptions fail init().
using ObserverFactory = std::function<std::shared_ptr<CollectiveObserver>(
    ProcessGroup& group, const EnvironmentMap& env)>;

/// Has every later ddp::init() call `factory` for the group it returns and
/// add the observer made, after the flight recorder's and those of the
/// factories registered before. Thread-safe; a factory registered twice
/// runs twice (Note [Parts attach observers through a registry]).
/// \throws InvalidArgumentError when `factory` is empty.
void register_observer_factory(ObserverFactory factory);

/// The factories registered so far, in order (ddp::init() runs them).
std::vector<ObserverFactory> registered_observer_factories();

}  // namespace ddp::comm

namespace ddp {
using namespace comm;  // Note [One namespace per layer] in ddp/ddp.hpp
}  // namespace ddp

# The collective timeline (ddp/timeline.hpp), part of the ddp library: the
# recorder and the collective observer that init() adds (Note [The timeline
# as an observer] in timeline_observer.hpp). Nothing in the core includes
# it: the timeline registers its observer with the core (Note [Parts attach
# observers through a registry] in ddp/observer_factory.hpp). Included by
# the top-level CMakeLists.txt.
target_sources(ddp PRIVATE
  ${PROJECT_SOURCE_DIR}/src/timeline/timeline.cpp
  ${PROJECT_SOURCE_DIR}/src/timeline/timeline_observer.cpp
)
# libddp.a is a static library: a program keeps only the objects it
# references, and nothing references the registration, so whatever links
# ddp asks for it by name (-u), as a shared library would give it.
target_link_options(ddp INTERFACE "LINKER:-u,ddp_timeline_observer_registered")

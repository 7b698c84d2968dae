# ddp::timeline: the collective timeline (ddp/timeline.hpp), the recorder and
# the collective observer that init() adds (Note [The timeline as an
# observer] in timeline_observer.hpp). Nothing in ddp::comm includes it: the
# timeline registers its observer with init() (Note [Parts attach observers
# through a registry] in ddp/comm/observer_factory.hpp). Included by the
# top-level CMakeLists.txt.
ddp_add_library(timeline DEPENDS ddp_comm SOURCES
  ${PROJECT_SOURCE_DIR}/src/timeline/timeline.cpp
  ${PROJECT_SOURCE_DIR}/src/timeline/timeline_observer.cpp)
# A static library: a program keeps only the objects it references, and
# nothing references the registration, so whatever links ddp_timeline asks
# for it by name (-u), as a shared library would give it.
target_link_options(ddp_timeline INTERFACE "LINKER:-u,ddp_timeline_observer_registered")

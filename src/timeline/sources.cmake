# The collective timeline (ddp/timeline.hpp), part of the ddp library: the
# recorder and the ProcessGroup decorator that init() applies (Note [The
# timeline at the edge] in timeline_process_group.hpp). Nothing in the core
# includes it. Included by the top-level CMakeLists.txt.
target_sources(ddp PRIVATE
  ${PROJECT_SOURCE_DIR}/src/timeline/timeline.cpp
  ${PROJECT_SOURCE_DIR}/src/timeline/timeline_process_group.cpp
)

# The Horovod-style API (ddp/horovod.hpp) and the collective timeline
# (ddp/timeline.hpp), part of the ddp library. Included by the top-level
# CMakeLists.txt after add_library(ddp ...). The timeline is recorded by
# ddp::ProcessGroup itself (src/process_group.cpp), so these sources are
# needed by every build of the library.
target_sources(ddp PRIVATE
  ${PROJECT_SOURCE_DIR}/src/horovod/timeline.cpp
  ${PROJECT_SOURCE_DIR}/src/horovod/timeline_scope.cpp
  ${PROJECT_SOURCE_DIR}/src/horovod/runtime.cpp
  ${PROJECT_SOURCE_DIR}/src/horovod/broadcast.cpp
  ${PROJECT_SOURCE_DIR}/src/horovod/distributed_optimizer.cpp
  ${PROJECT_SOURCE_DIR}/src/horovod/gradient_fusion.cpp
  ${PROJECT_SOURCE_DIR}/src/horovod/learning_rate.cpp)

# The Horovod-style API (ddp/horovod.hpp), part of the ddp library. Included
# by the top-level CMakeLists.txt after add_library(ddp ...). The timeline is
# a part of its own (src/timeline/).
target_sources(ddp PRIVATE
  ${PROJECT_SOURCE_DIR}/src/horovod/runtime.cpp
  ${PROJECT_SOURCE_DIR}/src/horovod/broadcast.cpp
  ${PROJECT_SOURCE_DIR}/src/horovod/distributed_optimizer.cpp
  ${PROJECT_SOURCE_DIR}/src/horovod/gradient_fusion.cpp
  ${PROJECT_SOURCE_DIR}/src/horovod/learning_rate.cpp)

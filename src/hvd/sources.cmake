# ddp::hvd: the Horovod-style API (ddp/hvd.hpp), a library of its
# own on ddp::ddp and ddp::snapshot (hvd::broadcast_optimizer_state carries
# optimizer state as snapshots do). Included by the top-level CMakeLists.txt
# after the layers and ddp::snapshot. The timeline is a part of its own
# (src/timeline/).
ddp_add_library(hvd STATIC DEPENDS ddp ddp_snapshot SOURCES
  ${PROJECT_SOURCE_DIR}/src/hvd/runtime.cpp
  ${PROJECT_SOURCE_DIR}/src/hvd/broadcast.cpp
  ${PROJECT_SOURCE_DIR}/src/hvd/distributed_optimizer.cpp
  ${PROJECT_SOURCE_DIR}/src/hvd/gradient_fusion.cpp
  ${PROJECT_SOURCE_DIR}/src/hvd/learning_rate.cpp)

# ddp::hvd: the Horovod-style API (ddp/hvd.hpp), a library of its
# own on the core and ddp::snapshot (hvd::broadcast_optimizer_state carries
# optimizer state as snapshots do). Included by the top-level CMakeLists.txt
# after the core and ddp::snapshot. The timeline is a part of its own
# (src/timeline/).
add_library(ddp_hvd STATIC
  ${PROJECT_SOURCE_DIR}/src/hvd/runtime.cpp
  ${PROJECT_SOURCE_DIR}/src/hvd/broadcast.cpp
  ${PROJECT_SOURCE_DIR}/src/hvd/distributed_optimizer.cpp
  ${PROJECT_SOURCE_DIR}/src/hvd/gradient_fusion.cpp
  ${PROJECT_SOURCE_DIR}/src/hvd/learning_rate.cpp)
add_library(ddp::hvd ALIAS ddp_hvd)
set_target_properties(ddp_hvd PROPERTIES EXPORT_NAME hvd)
target_link_libraries(ddp_hvd PUBLIC ddp ddp_snapshot)
target_include_directories(ddp_hvd PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_options(ddp_hvd PRIVATE -Wall -Wextra -Wno-unused-parameter)
target_compile_definitions(ddp_hvd PRIVATE USE_C10D_GLOO ${DDP_NCCL_DEFINITIONS})
target_precompile_headers(ddp_hvd REUSE_FROM ddp)

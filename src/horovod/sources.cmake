# ddp::horovod: the Horovod-style API (ddp/horovod.hpp), a library of its
# own on the core and ddp::snapshot (hvd::broadcast_optimizer_state carries
# optimizer state as snapshots do). Included by the top-level CMakeLists.txt
# after the core and ddp::snapshot. The timeline is a part of its own
# (src/timeline/).
add_library(ddp_horovod STATIC
  ${PROJECT_SOURCE_DIR}/src/horovod/runtime.cpp
  ${PROJECT_SOURCE_DIR}/src/horovod/broadcast.cpp
  ${PROJECT_SOURCE_DIR}/src/horovod/distributed_optimizer.cpp
  ${PROJECT_SOURCE_DIR}/src/horovod/gradient_fusion.cpp
  ${PROJECT_SOURCE_DIR}/src/horovod/learning_rate.cpp)
add_library(ddp::horovod ALIAS ddp_horovod)
set_target_properties(ddp_horovod PROPERTIES EXPORT_NAME horovod)
target_link_libraries(ddp_horovod PUBLIC ddp ddp_snapshot)
target_include_directories(ddp_horovod PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_options(ddp_horovod PRIVATE -Wall -Wextra -Wno-unused-parameter)
target_compile_definitions(ddp_horovod PRIVATE USE_C10D_GLOO ${DDP_NCCL_DEFINITIONS})
target_precompile_headers(ddp_horovod REUSE_FROM ddp)

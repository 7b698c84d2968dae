# ddp::snapshot: training-state snapshots (ddp/snapshot.hpp), a library of
# its own so that a program linking only the core (ddp::ddp) needs no zlib.
# The checksum is zlib's CRC-32. Included by the top-level CMakeLists.txt
# after the core.
add_library(ddp_snapshot STATIC
  ${PROJECT_SOURCE_DIR}/src/snapshot/snapshot_format.cpp
  ${PROJECT_SOURCE_DIR}/src/snapshot/optimizer_state.cpp
  ${PROJECT_SOURCE_DIR}/src/snapshot/rng_states.cpp
  ${PROJECT_SOURCE_DIR}/src/snapshot/snapshot.cpp
  ${PROJECT_SOURCE_DIR}/src/snapshot/snapshot_directory.cpp
  ${PROJECT_SOURCE_DIR}/src/snapshot/state_records.cpp
  ${PROJECT_SOURCE_DIR}/src/snapshot/zero_state.cpp)
add_library(ddp::snapshot ALIAS ddp_snapshot)
set_target_properties(ddp_snapshot PROPERTIES EXPORT_NAME snapshot)
find_package(ZLIB REQUIRED)
target_link_libraries(ddp_snapshot PUBLIC ddp PRIVATE ZLIB::ZLIB)
target_include_directories(ddp_snapshot PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_options(ddp_snapshot PRIVATE -Wall -Wextra -Wno-unused-parameter)
target_compile_definitions(ddp_snapshot PRIVATE USE_C10D_GLOO ${DDP_NCCL_DEFINITIONS})
target_precompile_headers(ddp_snapshot REUSE_FROM ddp)

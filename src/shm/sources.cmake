# The shared-memory engine (`shm`) and the hierarchical engine built on it,
# part of the ddp library. Included by the top-level CMakeLists.txt.
target_sources(ddp PRIVATE
  ${PROJECT_SOURCE_DIR}/src/shm/segment.cpp
  ${PROJECT_SOURCE_DIR}/src/shm/node_barrier.cpp
  ${PROJECT_SOURCE_DIR}/src/shm/reduce_kernels.cpp
  ${PROJECT_SOURCE_DIR}/src/shm/communicator.cpp
  ${PROJECT_SOURCE_DIR}/src/shm/serial_executor.cpp
  ${PROJECT_SOURCE_DIR}/src/shm/tensor_bridge.cpp
  ${PROJECT_SOURCE_DIR}/src/backends/node_grouping.cpp
  ${PROJECT_SOURCE_DIR}/src/backends/shm_process_group.cpp
  ${PROJECT_SOURCE_DIR}/src/backends/hierarchical_process_group.cpp)
# The reduction loops: -O3 so that GCC vectorizes them, and no precompiled
# LibTorch header (the file needs only c10's Half), so it builds in seconds.
set_source_files_properties(${PROJECT_SOURCE_DIR}/src/shm/reduce_kernels.cpp PROPERTIES
  SKIP_PRECOMPILE_HEADERS ON COMPILE_OPTIONS "-O3")
# shm_open and friends live in librt on older C libraries.
find_library(DDP_LIBRT rt)
if(DDP_LIBRT)
  target_link_libraries(ddp PRIVATE ${DDP_LIBRT})
endif()

# DataParallel (ddp/data_parallel.hpp), part of the ddp library. Included by
# the top-level CMakeLists.txt after add_library(ddp ...).
target_sources(ddp PRIVATE
  ${PROJECT_SOURCE_DIR}/src/data_parallel/data_parallel.cpp
  ${PROJECT_SOURCE_DIR}/src/data_parallel/replica_set.cpp
  ${PROJECT_SOURCE_DIR}/src/data_parallel/replica_workers.cpp)

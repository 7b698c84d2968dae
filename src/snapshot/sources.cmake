# Training-state snapshots (ddp/snapshot.hpp), part of the ddp library.
# Included by the top-level CMakeLists.txt after add_library(ddp ...). The
# checksum is zlib's CRC-32; zlib is linked by src/data/sources.cmake, and is
# found here as well so that this file does not depend on that one.
target_sources(ddp PRIVATE
  ${PROJECT_SOURCE_DIR}/src/snapshot/snapshot_format.cpp
  ${PROJECT_SOURCE_DIR}/src/snapshot/optimizer_state.cpp
  ${PROJECT_SOURCE_DIR}/src/snapshot/snapshot.cpp)
find_package(ZLIB REQUIRED)
target_link_libraries(ddp PRIVATE ZLIB::ZLIB)

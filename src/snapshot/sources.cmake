# ddp::snapshot: training-state snapshots (ddp/snapshot.hpp), a library of
# its own so that a program linking only ddp::ddp needs no zlib.
# The checksum is zlib's CRC-32. PyTorch's own formats are ddp::formats'
# (src/formats/); the checkpoints for and from PyTorch map them to a state. Included by the top-level CMakeLists.txt
# after the layers.
ddp_add_library(snapshot STATIC DEPENDS ddp ddp_formats SOURCES
  ${PROJECT_SOURCE_DIR}/src/snapshot/snapshot_format.cpp
  ${PROJECT_SOURCE_DIR}/src/snapshot/optimizer_state.cpp
  ${PROJECT_SOURCE_DIR}/src/snapshot/rng_states.cpp
  ${PROJECT_SOURCE_DIR}/src/snapshot/snapshot.cpp
  ${PROJECT_SOURCE_DIR}/src/snapshot/training_state_restore.cpp
  ${PROJECT_SOURCE_DIR}/src/snapshot/snapshot_directory.cpp
  ${PROJECT_SOURCE_DIR}/src/snapshot/state_records.cpp
  ${PROJECT_SOURCE_DIR}/src/snapshot/sharded_state.cpp
  ${PROJECT_SOURCE_DIR}/src/snapshot/saved_parameters.cpp
  ${PROJECT_SOURCE_DIR}/src/snapshot/consolidated_export.cpp
  ${PROJECT_SOURCE_DIR}/src/snapshot/consolidated_optimizer.cpp
  ${PROJECT_SOURCE_DIR}/src/snapshot/snapshot_writing.cpp
  ${PROJECT_SOURCE_DIR}/src/snapshot/staging_buffer.cpp
  ${PROJECT_SOURCE_DIR}/src/snapshot/background_writer.cpp
  ${PROJECT_SOURCE_DIR}/src/snapshot/async_save.cpp
  ${PROJECT_SOURCE_DIR}/src/snapshot/pytorch_optimizer.cpp
  ${PROJECT_SOURCE_DIR}/src/snapshot/pytorch_checkpoint.cpp
  ${PROJECT_SOURCE_DIR}/src/snapshot/pytorch_import.cpp
  ${PROJECT_SOURCE_DIR}/src/snapshot/dcp_layout.cpp
  ${PROJECT_SOURCE_DIR}/src/snapshot/dcp_save.cpp
  ${PROJECT_SOURCE_DIR}/src/snapshot/dcp_load.cpp)
find_package(ZLIB REQUIRED)
target_link_libraries(ddp_snapshot PRIVATE ZLIB::ZLIB)

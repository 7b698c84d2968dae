# ddp's modules (include/ddp/nn/: SyncBatchNorm), part of the ddp library.
# Included by the top-level CMakeLists.txt after add_library(ddp ...).
target_sources(ddp PRIVATE
  ${PROJECT_SOURCE_DIR}/src/nn/sync_batch_norm.cpp
  ${PROJECT_SOURCE_DIR}/src/nn/sync_batch_norm_function.cpp
  ${PROJECT_SOURCE_DIR}/src/nn/convert_sync_batchnorm.cpp)

# Mixed precision (ddp/amp.hpp, ddp/autocast.hpp, ddp/grad_scaler.hpp) and
# SyncBatchNorm (ddp/sync_batch_norm.hpp), part of the ddp library.
# Included by the top-level CMakeLists.txt after add_library(ddp ...).
target_sources(ddp PRIVATE
  ${PROJECT_SOURCE_DIR}/src/amp/autocast.cpp
  ${PROJECT_SOURCE_DIR}/src/amp/grad_scaler.cpp
  ${PROJECT_SOURCE_DIR}/src/amp/mixed_precision.cpp
  ${PROJECT_SOURCE_DIR}/src/amp/sync_batch_norm.cpp
  ${PROJECT_SOURCE_DIR}/src/amp/sync_batch_norm_function.cpp
  ${PROJECT_SOURCE_DIR}/src/amp/convert_sync_batchnorm.cpp)

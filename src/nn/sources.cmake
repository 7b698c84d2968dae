# ddp::nn: SyncBatchNorm, convert_sync_batchnorm and checkpoint (ddp/nn.hpp). Included by
# the top-level CMakeLists.txt.
ddp_add_library(nn DEPENDS ddp_parallel SOURCES
  ${PROJECT_SOURCE_DIR}/src/nn/sync_batch_norm.cpp
  ${PROJECT_SOURCE_DIR}/src/nn/sync_batch_norm_function.cpp
  ${PROJECT_SOURCE_DIR}/src/nn/convert_sync_batchnorm.cpp
  ${PROJECT_SOURCE_DIR}/src/nn/checkpoint.cpp)

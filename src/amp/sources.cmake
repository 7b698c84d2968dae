# ddp::amp: mixed precision (ddp/amp.hpp): autocast, the GradScaler whose
# inf check is one all-reduce, and fp16/bf16 DDP. Included by the top-level
# CMakeLists.txt.
ddp_add_library(amp DEPENDS ddp_parallel ddp_nn SOURCES
  ${PROJECT_SOURCE_DIR}/src/amp/autocast.cpp
  ${PROJECT_SOURCE_DIR}/src/amp/grad_scaler.cpp
  ${PROJECT_SOURCE_DIR}/src/amp/mixed_precision.cpp)

# Mixed precision (include/ddp/amp/), part of the ddp library.
# Included by the top-level CMakeLists.txt after add_library(ddp ...).
target_sources(ddp PRIVATE
  ${PROJECT_SOURCE_DIR}/src/amp/autocast.cpp
  ${PROJECT_SOURCE_DIR}/src/amp/grad_scaler.cpp
  ${PROJECT_SOURCE_DIR}/src/amp/mixed_precision.cpp)

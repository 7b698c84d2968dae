# Training feedback (ddp/training/*.hpp): progress lines, the per-epoch
# metrics CSV and gnuplot curves, part of the ddp library. Included by the
# top-level CMakeLists.txt after add_library(ddp ...).
target_sources(ddp PRIVATE
  ${PROJECT_SOURCE_DIR}/src/training/progress.cpp
  ${PROJECT_SOURCE_DIR}/src/training/metrics_csv.cpp
  ${PROJECT_SOURCE_DIR}/src/training/plot.cpp)

# ddp::training: training feedback (ddp/training/*.hpp): progress lines, the
# per-epoch metrics CSV and gnuplot curves, the FLOP counter and the
# machine's measured peak (MFU), a library of its own so that a
# program linking only ddp::ddp needs no gnuplot. Included by the
# top-level CMakeLists.txt after add_library(ddp ...).
ddp_add_library(training STATIC DEPENDS ddp SOURCES
  ${PROJECT_SOURCE_DIR}/src/training/progress.cpp
  ${PROJECT_SOURCE_DIR}/src/training/metrics_csv.cpp
  ${PROJECT_SOURCE_DIR}/src/training/plot.cpp
  ${PROJECT_SOURCE_DIR}/src/training/flop_counter.cpp
  ${PROJECT_SOURCE_DIR}/src/training/machine_peak.cpp)

# ddp::training: training feedback (ddp/training/*.hpp): progress lines, the
# per-epoch metrics CSV and gnuplot curves, a library of its own so that a
# program linking only the core (ddp::ddp) needs no gnuplot. Included by the
# top-level CMakeLists.txt after add_library(ddp ...).
add_library(ddp_training STATIC
  ${PROJECT_SOURCE_DIR}/src/training/progress.cpp
  ${PROJECT_SOURCE_DIR}/src/training/metrics_csv.cpp
  ${PROJECT_SOURCE_DIR}/src/training/plot.cpp)
add_library(ddp::training ALIAS ddp_training)
set_target_properties(ddp_training PROPERTIES EXPORT_NAME training)
target_link_libraries(ddp_training PUBLIC ddp)
target_include_directories(ddp_training PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_options(ddp_training PRIVATE -Wall -Wextra -Wno-unused-parameter)
target_compile_definitions(ddp_training PRIVATE USE_C10D_GLOO ${DDP_NCCL_DEFINITIONS})
target_precompile_headers(ddp_training REUSE_FROM ddp)

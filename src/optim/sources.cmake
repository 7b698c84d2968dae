# ddp::optim: optimizers whose step makes one ATen call per list of
# parameters (SGD) or one pass over memory per parameter (Adam, AdamW)
# (ddp/optim.hpp). Included by the top-level CMakeLists.txt.
set(optim ${PROJECT_SOURCE_DIR}/src/optim)
ddp_add_library(optim DEPENDS ddp_comm SOURCES
  ${optim}/adam.cpp
  ${optim}/adam_kernel.cpp
  ${optim}/adam_step.cpp
  ${optim}/adamw.cpp
  ${optim}/sgd.cpp)
# Note [Same rounding as LibTorch's Adam] (src/optim/adam_kernel.cpp): the
# kernel fuses only the multiply-adds ATen fuses, and vectorizes (-O3, and
# std::sqrt without errno); compiled alone, so that no other source in a
# unity batch gets these flags.
set_source_files_properties(${optim}/adam_kernel.cpp PROPERTIES
  COMPILE_OPTIONS "-O3;-ffp-contract=off;-fno-math-errno"
  SKIP_UNITY_BUILD_INCLUSION ON SKIP_PRECOMPILE_HEADERS ON)

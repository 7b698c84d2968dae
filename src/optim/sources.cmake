# ddp::optim: optimizers whose step makes one ATen call per list of
# parameters (ddp/optim.hpp). Included by the top-level CMakeLists.txt.
ddp_add_library(optim DEPENDS ddp_comm SOURCES
  ${PROJECT_SOURCE_DIR}/src/optim/sgd.cpp)

# ddp::data: the data readers (idx files, Fashion-MNIST) and the
# DistributedSampler, a library of its own so that a program linking only
# the core (ddp::ddp) needs no zlib. Included by the top-level
# CMakeLists.txt after add_library(ddp ...).
add_library(ddp_data STATIC
  ${PROJECT_SOURCE_DIR}/src/data/idx.cpp
  ${PROJECT_SOURCE_DIR}/src/data/distributed_sampler.cpp
  ${PROJECT_SOURCE_DIR}/src/data/fashion_mnist.cpp)
add_library(ddp::data ALIAS ddp_data)
set_target_properties(ddp_data PROPERTIES EXPORT_NAME data)
# zlib reads the gzipped idx files as distributed. ddp_data is a static
# library, so this PRIVATE dependency still reaches consumers (as
# $<LINK_ONLY:ZLIB::ZLIB> in the exported target); ddpConfig.cmake therefore
# calls find_dependency(ZLIB).
find_package(ZLIB REQUIRED)
target_link_libraries(ddp_data PUBLIC ddp PRIVATE ZLIB::ZLIB)
target_include_directories(ddp_data PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_options(ddp_data PRIVATE -Wall -Wextra -Wno-unused-parameter)
target_compile_definitions(ddp_data PRIVATE USE_C10D_GLOO ${DDP_NCCL_DEFINITIONS})
target_precompile_headers(ddp_data REUSE_FROM ddp)

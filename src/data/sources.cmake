# ddp::data: the data readers (idx files, Fashion-MNIST) and the
# DistributedSampler, a library of its own so that a program linking only
# the core (ddp::ddp) needs no zlib. Included by the top-level
# CMakeLists.txt after add_library(ddp ...).
ddp_add_library(data STATIC DEPENDS ddp SOURCES
  ${PROJECT_SOURCE_DIR}/src/data/idx.cpp
  ${PROJECT_SOURCE_DIR}/src/data/distributed_sampler.cpp
  ${PROJECT_SOURCE_DIR}/src/data/fashion_mnist.cpp)
# zlib reads the gzipped idx files as distributed. ddp_data is a static
# library, so this PRIVATE dependency still reaches consumers (as
# $<LINK_ONLY:ZLIB::ZLIB> in the exported target); ddpConfig.cmake therefore
# calls find_dependency(ZLIB).
find_package(ZLIB REQUIRED)
target_link_libraries(ddp_data PRIVATE ZLIB::ZLIB)

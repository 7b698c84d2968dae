# The data readers (idx files, Fashion-MNIST), part of the ddp library.
# Included by the top-level CMakeLists.txt after add_library(ddp ...).
target_sources(ddp PRIVATE
  ${PROJECT_SOURCE_DIR}/src/data/idx.cpp
  ${PROJECT_SOURCE_DIR}/src/data/distributed_sampler.cpp
  ${PROJECT_SOURCE_DIR}/src/data/fashion_mnist.cpp)
# zlib reads the gzipped idx files as distributed. ddp is a static library, so
# this PRIVATE dependency still reaches consumers (as $<LINK_ONLY:ZLIB::ZLIB>
# in the exported target); ddpConfig.cmake therefore calls
# find_dependency(ZLIB).
find_package(ZLIB REQUIRED)
target_link_libraries(ddp PRIVATE ZLIB::ZLIB)

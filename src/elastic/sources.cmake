# ddp::elastic: recovery in memory (ddp/elastic.hpp), a library of its own
# on ddp::ddp and ddp::snapshot (a commit is a snapshot's records, kept in
# memory). Included by the top-level CMakeLists.txt after ddp::snapshot.
ddp_add_library(elastic STATIC DEPENDS ddp ddp_snapshot SOURCES
  ${PROJECT_SOURCE_DIR}/src/elastic/generations.cpp
  ${PROJECT_SOURCE_DIR}/src/elastic/membership_watch.cpp
  ${PROJECT_SOURCE_DIR}/src/elastic/run.cpp
  ${PROJECT_SOURCE_DIR}/src/elastic/shard_buddies.cpp
  ${PROJECT_SOURCE_DIR}/src/elastic/state.cpp)

# ddp::elastic: recovery in memory (ddp/elastic.hpp), a library of its own
# on the core and ddp::snapshot (a commit is a snapshot's records, kept in
# memory). Included by the top-level CMakeLists.txt after ddp::snapshot.
add_library(ddp_elastic STATIC
  ${PROJECT_SOURCE_DIR}/src/elastic/run.cpp
  ${PROJECT_SOURCE_DIR}/src/elastic/state.cpp)
add_library(ddp::elastic ALIAS ddp_elastic)
set_target_properties(ddp_elastic PROPERTIES EXPORT_NAME elastic)
target_link_libraries(ddp_elastic PUBLIC ddp ddp_snapshot)
target_include_directories(ddp_elastic PRIVATE ${PROJECT_SOURCE_DIR}/src)
target_compile_options(ddp_elastic PRIVATE -Wall -Wextra -Wno-unused-parameter)
target_compile_definitions(ddp_elastic PRIVATE USE_C10D_GLOO ${DDP_NCCL_DEFINITIONS})
target_precompile_headers(ddp_elastic REUSE_FROM ddp)

# ddp_add_library(name [STATIC] SOURCES file... [DEPENDS target...])
#
# One library of ddp's layers or parts: ddp_<name>, which a consumer names
# ddp::<name> (here through the alias, installed through EXPORT_NAME). Its
# sources live in src/<name>/ and see src/ as their private include root; its
# public headers are include/ddp/<name>/. DEPENDS are the layers and parts it
# stands on (PUBLIC). Every library reuses ddp_comm's precompiled LibTorch
# header (Note [A precompiled header ccache can reuse] in src/comm/sources.cmake).
function(ddp_add_library name)
  cmake_parse_arguments(arg "STATIC" "" "SOURCES;DEPENDS" ${ARGN})
  if(NOT arg_SOURCES)
    message(FATAL_ERROR "ddp_add_library(${name}): give its SOURCES")
  endif()
  set(kind "")
  if(arg_STATIC)
    set(kind STATIC)
  endif()
  set(target ddp_${name})
  add_library(${target} ${kind} ${arg_SOURCES})
  add_library(ddp::${name} ALIAS ${target})
  set_target_properties(${target} PROPERTIES EXPORT_NAME ${name} VERSION ${PROJECT_VERSION} SOVERSION 0)
  # Note [Moved headers]
  # A public header that moved keeps its old path as a forwarding header in
  # include/moved/ddp/, which warns once per translation unit (#pragma GCC
  # warning, which GCC and Clang both honour) and includes the new path.
  # They live in a root of their own so that include/ddp/ holds only the
  # parts (scripts/check-layout.sh); installed, they merge into include/ddp/.
  # tests/docs/moved_headers_check.cmake compiles every old path.
  target_include_directories(${target}
    PUBLIC $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include>
           $<BUILD_INTERFACE:${PROJECT_SOURCE_DIR}/include/moved> $<INSTALL_INTERFACE:include>
    PRIVATE ${PROJECT_SOURCE_DIR}/src)
  if(arg_DEPENDS)
    target_link_libraries(${target} PUBLIC ${arg_DEPENDS})
  endif()
  target_compile_options(${target} PRIVATE -Wall -Wextra -Wno-unused-parameter)
  target_compile_definitions(${target} PRIVATE USE_C10D_GLOO ${DDP_NCCL_DEFINITIONS})
  # ddp::base needs no LibTorch header, and stands below ddp_comm.
  if(NOT name STREQUAL "comm" AND NOT name STREQUAL "base")
    target_precompile_headers(${target} REUSE_FROM ddp_comm)
  endif()
endfunction()

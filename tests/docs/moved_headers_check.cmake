# DocsMovedHeaders (Note [Moved headers] in cmake/DdpLibrary.cmake): builds
# moved_headers_check, whose one source includes every old path twice, and
# checks that it compiles and that each old path warned exactly once,
# naming its new path.
# -DBUILD_DIR= the build tree; -DOBJECT_DIR= the target's object folder;
# -DMOVED_DIR= include/moved.
file(GLOB_RECURSE objects "${OBJECT_DIR}/*.o")
if(objects)
  file(REMOVE ${objects})
endif()
execute_process(COMMAND ${CMAKE_COMMAND} --build ${BUILD_DIR} --target moved_headers_check
  OUTPUT_VARIABLE output ERROR_VARIABLE output RESULT_VARIABLE result)
if(NOT result EQUAL 0)
  message(FATAL_ERROR "the old include paths do not compile (exit ${result}):\n${output}")
endif()
file(GLOB_RECURSE headers RELATIVE ${MOVED_DIR} ${MOVED_DIR}/ddp/*.hpp)
list(LENGTH headers count)
if(count EQUAL 0)
  message(FATAL_ERROR "no forwarding header under ${MOVED_DIR}")
endif()
set(failures "")
foreach(header ${headers})
  file(STRINGS ${MOVED_DIR}/${header} forward REGEX "^#include \"ddp/")
  string(REGEX REPLACE "^#include \"([^\"]+)\".*" "\\1" new_path "${forward}")
  if(NOT EXISTS ${MOVED_DIR}/../${new_path})
    string(APPEND failures "  <${header}> forwards to <${new_path}>, which does not exist\n")
  endif()
  string(REGEX MATCHALL "warning: <${header}> moved to <${new_path}>" warnings "${output}")
  list(LENGTH warnings warned)
  if(NOT warned EQUAL 1)
    string(APPEND failures "  <${header}>: ${warned} warning(s) 'moved to <${new_path}>', expected 1\n")
  endif()
endforeach()
if(failures)
  message(FATAL_ERROR "moved headers:\n${failures}the build printed:\n${output}")
endif()
message(STATUS "${count} old include paths compile, each warning once with its new path")

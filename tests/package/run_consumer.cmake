# Installs ddp into a scratch prefix, builds the consumers against it (one
# linking only ddp::ddp, one linking ddp::data and ddp::training), runs them.
function(run step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err
                  TIMEOUT 500)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${step} failed (${result}):\n${out}\n${err}")
  endif()
  message(STATUS "${step}: ok\n${out}")
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
run("install ddp" ${CMAKE_COMMAND} --install ${DDP_BUILD_DIR} --prefix ${prefix})
set(launcher "")
if(CCACHE)
  set(launcher -DCMAKE_CXX_COMPILER_LAUNCHER=${CCACHE})
endif()
string(REPLACE "|" ";" prefix_path "${prefix};${PREFIX_PATH}")
set(torch "")
if(TORCH_DIR)
  set(torch -DTorch_DIR=${TORCH_DIR})
endif()
run("configure consumer" ${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${WORK_DIR}/build
    "-DCMAKE_PREFIX_PATH=${prefix_path}" -DCMAKE_BUILD_TYPE=Release ${launcher} ${torch})
run("build consumer" ${CMAKE_COMMAND} --build ${WORK_DIR}/build)
run("run consumer" ${WORK_DIR}/build/consumer)
run("run consumer_data_training" ${WORK_DIR}/build/consumer_data_training ${WORK_DIR})

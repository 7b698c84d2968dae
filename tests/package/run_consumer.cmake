# Installs ddp into a scratch prefix, builds the consumers against it (one
# linking only ddp::ddp, one linking ddp::data and ddp::training, one
# linking ddp::snapshot), runs the first two, starts the third with the
# installed bin/ddprun on 2 ranks, exports its snapshot with the installed
# bin/ddp-export and loads that with PyTorch's torch.load (Debian's
# /usr/bin/python3, where it has torch).
function(run step)
  execute_process(COMMAND ${ARGN} RESULT_VARIABLE result OUTPUT_VARIABLE out ERROR_VARIABLE err
                  TIMEOUT 500)
  if(NOT result EQUAL 0)
    message(FATAL_ERROR "${step} failed (${result}):\n${out}\n${err}")
  endif()
  message(STATUS "${step}: ok\n${out}\n${err}")
  set(run_output "${out}${err}" PARENT_SCOPE)
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

# The installed launcher and exporter: where the install put them, a job of
# the installed library under them that warns of nothing, and its snapshot
# as a file PyTorch loads with the weights rank 0 printed.
foreach(tool ddprun ddp-export)
  if(NOT EXISTS ${prefix}/bin/${tool})
    message(FATAL_ERROR "cmake --install put no ${tool} in ${prefix}/bin")
  endif()
endforeach()
set(snapshots ${WORK_DIR}/snapshots)
run("run consumer_launched under the installed ddprun" ${prefix}/bin/ddprun --standalone
    --nproc-per-node 2 ${WORK_DIR}/build/consumer_launched ${snapshots})
if(run_output MATCHES "[Ww]arning")
  message(FATAL_ERROR "the installed ddprun's job warned:\n${run_output}")
endif()
if(NOT run_output MATCHES "consumer_launched: weight(( -?[0-9.e+-]+)+)")
  message(FATAL_ERROR "consumer_launched printed no weights:\n${run_output}")
endif()
string(STRIP "${CMAKE_MATCH_1}" weights)
run("export its snapshot with the installed ddp-export" ${prefix}/bin/ddp-export ${snapshots}
    --to torch ${WORK_DIR}/model.pt)
execute_process(COMMAND /usr/bin/python3 -c "import torch" RESULT_VARIABLE no_torch
                OUTPUT_QUIET ERROR_QUIET)
if(no_torch EQUAL 0)
  run("load the export with torch.load" /usr/bin/python3 -c "
import sys, torch
checkpoint = torch.load(sys.argv[1])
weight = checkpoint['model']['weight'].flatten().tolist()
printed = [float(v) for v in sys.argv[2].split()]
assert checkpoint['epoch'] == 1, checkpoint['epoch']
assert len(weight) == len(printed) == 6 and all(abs(a - b) <= 1e-7 * max(1, abs(b)) for a, b in zip(weight, printed)), (weight, printed)
assert sorted(checkpoint['model']) == ['bias', 'weight'], list(checkpoint['model'])
print('torch.load: weight', weight)
" ${WORK_DIR}/model.pt "${weights}")
else()
  message(STATUS "load the export with torch.load: skipped, /usr/bin/python3 has no torch")
endif()

# ddp::comm, the communication layer on ddp::base: process
# groups and Work, the backends (gloo, nccl, shm, hierarchical), the
# rendezvous store, init() and the environment, the flight recorder and the
# collective observers. Included by the top-level CMakeLists.txt.
set(comm ${PROJECT_SOURCE_DIR}/src/comm)
ddp_add_library(comm DEPENDS ddp_base SOURCES
  ${comm}/error_file.cpp
  ${comm}/environment.cpp
  ${comm}/init.cpp
  ${comm}/process_group.cpp
  ${comm}/reduce_op.cpp
  ${comm}/collective_observation.cpp
  ${comm}/observer_factory.cpp
  ${comm}/work.cpp
  ${comm}/broadcast_tensors.cpp
  ${comm}/device_mesh.cpp
  ${comm}/collective_name.cpp
  ${comm}/byte_exchange.cpp
  ${comm}/timeout_message.cpp
  ${comm}/flight_recorder/entry_json.cpp
  ${comm}/flight_recorder/flight_recorder.cpp
  ${comm}/flight_recorder/flight_recorder_observer.cpp
  ${comm}/flight_recorder/ring.cpp
  ${comm}/backends/c10d_process_group.cpp
  ${comm}/backends/gloo_backend.cpp
  ${comm}/backends/gloo_process_group.cpp
  ${comm}/backends/auto_process_group.cpp
  ${comm}/backends/node_grouping.cpp
  ${comm}/backends/shm_process_group.cpp
  ${comm}/backends/hierarchical_process_group.cpp
  ${DDP_NCCL_SOURCE}
  ${comm}/shm/segment.cpp
  ${comm}/shm/node_barrier.cpp
  ${comm}/shm/reduce_kernels.cpp
  ${comm}/shm/communicator.cpp
  ${comm}/shm/serial_executor.cpp
  ${comm}/shm/tensor_bridge.cpp
  ${comm}/store/handshake.cpp
  ${comm}/store/job_secret.cpp
  ${comm}/store/socket.cpp
  ${comm}/store/store_server.cpp
  ${comm}/store/tcp_store.cpp
  ${comm}/store/worker_protocol.cpp)
# The NCCL backend compiles only where CUDA is, so it is compiled alone (Note
# [Unity builds]).
set_source_files_properties(${DDP_NCCL_SOURCE} PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)
# Note [libstdc++ ahead of LibTorch]
# PyTorch's pip wheels are built with the manylinux toolchain, whose static
# part of libstdc++ leaves copies of newer symbols (std::filesystem among
# them) inside libtorch.so, exported. A program that links LibTorch before
# libstdc++ binds std::filesystem::remove_all to that copy, which crashes
# (seen with PyTorch 2.11+cu130 and GCC 13). Naming libstdc++ first makes the
# dynamic linker find the compiler's own; elsewhere it changes nothing.
if(CMAKE_CXX_COMPILER_ID STREQUAL "GNU")
  target_link_libraries(ddp_comm PUBLIC stdc++)
endif()
target_link_libraries(ddp_comm PUBLIC ${TORCH_LIBRARIES} Threads::Threads PRIVATE OpenSSL::Crypto)
if(DDP_WITH_NCCL)
  target_include_directories(ddp_comm SYSTEM PRIVATE ${DDP_NCCL_HEADER_DIR})
endif()
# ddp's own Gloo collectives (Note [Gloo collectives without a full-size
# copy]) call Gloo directly: Debian's LibTorch links it as libgloo, PyTorch's
# wheels carry it inside libtorch_cpu.
find_library(DDP_GLOO_LIBRARY gloo)
if(DDP_GLOO_LIBRARY)
  target_link_libraries(ddp_comm PRIVATE ${DDP_GLOO_LIBRARY})
endif()
# shm_open and friends live in librt on older C libraries.
find_library(DDP_LIBRT rt)
if(DDP_LIBRT)
  target_link_libraries(ddp_comm PRIVATE ${DDP_LIBRT})
endif()
# The reduction loops: -O3 so that GCC vectorizes them, and no precompiled
# LibTorch header (the file needs only c10's Half), so it builds in seconds.
set_source_files_properties(${comm}/shm/reduce_kernels.cpp PROPERTIES
  SKIP_PRECOMPILE_HEADERS ON COMPILE_OPTIONS "-O3")
# Note [A precompiled header ccache can reuse]
# The LibTorch headers every translation unit of ddp, its tests and tools
# would otherwise parse again (about 40 s each on two cores), precompiled
# once. They are named in angle brackets, so the header CMake generates says
# `#include <torch/torch.h>` and not the checkout's absolute path: the same in
# every checkout and build folder, so ccache returns the same .gch for it
# (GCC's own .gch differs from one compile to the next), and with it every
# translation unit, in a fresh build folder or a fresh clone alike.
target_precompile_headers(ddp_comm PRIVATE <torch/torch.h>
  <torch/csrc/distributed/c10d/ProcessGroup.hpp> <torch/csrc/distributed/c10d/Store.hpp>)

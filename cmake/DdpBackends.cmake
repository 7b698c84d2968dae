# Which c10d engines this build of ddp carries. The choice is made here, by
# picking source files, and never by #if inside the collective logic.
#
# NCCL comes with a CUDA LibTorch (libtorch_cuda carries ProcessGroupNCCL);
# Debian's LibTorch is CPU-only, so there the nccl backend is the file that
# reports it unavailable.
set(DDP_WITH_NCCL OFF)
if(TORCH_CUDA_LIBRARIES OR TARGET torch_cuda)
  include(CheckIncludeFileCXX)
  set(CMAKE_REQUIRED_INCLUDES ${TORCH_INCLUDE_DIRS})
  set(CMAKE_REQUIRED_DEFINITIONS -DUSE_C10D_NCCL)
  check_include_file_cxx(torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp
                         DDP_HAVE_NCCL_HEADER)
  if(DDP_HAVE_NCCL_HEADER)
    set(DDP_WITH_NCCL ON)
  endif()
endif()

if(DDP_WITH_NCCL)
  set(DDP_NCCL_SOURCE src/backends/nccl_process_group.cpp)
  set(DDP_NCCL_DEFINITIONS USE_C10D_NCCL)
else()
  set(DDP_NCCL_SOURCE src/backends/nccl_unavailable.cpp)
  set(DDP_NCCL_DEFINITIONS "")
endif()
message(STATUS "ddp: LibTorch ${Torch_VERSION}; nccl backend: ${DDP_WITH_NCCL}")

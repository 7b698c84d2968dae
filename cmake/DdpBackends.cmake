# Which c10d backends this build of ddp carries. The choice is made here, by
# picking source files, and never by #if inside the collective logic.
#
# NCCL comes with a CUDA LibTorch (libtorch_cuda carries ProcessGroupNCCL);
# Debian's LibTorch is CPU-only, so there the nccl backend is the file that
# reports it unavailable.
#
# A CUDA LibTorch carries c10d's NCCL backend; compiling against it also
# needs nccl.h, which Debian's libnccl-dev puts in /usr/include and the
# nvidia-nccl wheel beside a pip-installed PyTorch in site-packages: point
# DDP_NCCL_INCLUDE_DIR at its directory when it is elsewhere. A CUDA LibTorch
# without nccl.h is a configuration error (say -DDDP_NCCL=OFF to build
# without the backend), so that a GPU build never loses NCCL silently.
set(DDP_NCCL_INCLUDE_DIR "" CACHE PATH "Directory of nccl.h, when not on the default path")
option(DDP_NCCL "Compile the NCCL backend when LibTorch has CUDA" ON)
set(DDP_WITH_NCCL OFF)
if(DDP_NCCL AND (TORCH_CUDA_LIBRARIES OR TARGET torch_cuda))
  find_file(DDP_NCCL_BACKEND_HEADER torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp
            PATHS ${TORCH_INCLUDE_DIRS} NO_DEFAULT_PATH)
  find_path(DDP_NCCL_HEADER_DIR nccl.h
            HINTS ${DDP_NCCL_INCLUDE_DIR} ${CUDAToolkit_INCLUDE_DIRS} /usr/local/cuda/include)
  if(NOT DDP_NCCL_BACKEND_HEADER OR NOT DDP_NCCL_HEADER_DIR)
    message(FATAL_ERROR "ddp: this LibTorch has CUDA, but ProcessGroupNCCL.hpp "
            "(${DDP_NCCL_BACKEND_HEADER}) or nccl.h (${DDP_NCCL_HEADER_DIR}) was not found. "
            "Set DDP_NCCL_INCLUDE_DIR to the directory of nccl.h, or -DDDP_NCCL=OFF to build "
            "without the NCCL backend.")
  endif()
  set(DDP_WITH_NCCL ON)
endif()

if(DDP_WITH_NCCL)
  set(DDP_NCCL_SOURCE ${PROJECT_SOURCE_DIR}/src/comm/backends/nccl_process_group.cpp)
  set(DDP_NCCL_DEFINITIONS USE_C10D_NCCL)
else()
  set(DDP_NCCL_SOURCE ${PROJECT_SOURCE_DIR}/src/comm/backends/nccl_unavailable.cpp)
  set(DDP_NCCL_DEFINITIONS "")
endif()
message(STATUS "ddp: LibTorch ${Torch_VERSION}; nccl backend: ${DDP_WITH_NCCL}")

# ddp::base, the layer below every other: the exceptions and their one table
# of exit codes (public, ddp/base/errors.hpp), the BLAS in use (public,
# ddp/base/blas.hpp), the host allocator in use (public,
# ddp/base/allocator.hpp), and the internal helpers every layer uses (str.hpp for
# messages, scope_exit.hpp, dtype_name.hpp, and compat/torch_compat.hpp, the
# one place LibTorch versions differ). It needs only the standard library
# and libdl; the helpers that name LibTorch are headers, compiled by the
# layers that link it. Included by the top-level CMakeLists.txt.
set(base ${PROJECT_SOURCE_DIR}/src/base)
ddp_add_library(base SOURCES
  ${base}/allocator.cpp
  ${base}/blas.cpp
  ${base}/errors.cpp)
# dladdr and dlopen: which library sgemm_ (ddp/base/blas.hpp) and malloc
# (ddp/base/allocator.hpp) resolve to.
target_link_libraries(ddp_base PRIVATE ${CMAKE_DL_LIBS})

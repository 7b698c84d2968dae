#pragma once

// Internal: what blas_in_use() and allocator_in_use() ask of a library
// loaded in this process (ddp/base/blas.hpp, ddp/base/allocator.hpp).

#include <dlfcn.h>

#include <climits>
#include <cstdlib>
#include <memory>
#include <string>

namespace ddp::base::detail {

/// `path` with its symbolic links resolved; `path` itself where it cannot be.
inline std::string resolved_path(const char* path) {
  char real[PATH_MAX];
  return ::realpath(path, real) != nullptr ? std::string(real) : std::string(path);
}

/// The file name of `path`, without its folders.
inline std::string file_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

/// `name` in the library `handle` and the libraries it needs (an interface
/// library such as OpenBLAS's libblas.so.3 keeps its code in libopenblas.so.0).
template <typename Function>
Function* find_symbol(void* handle, const char* name) {
  return reinterpret_cast<Function*>(::dlsym(handle, name));
}

/// The loaded library that defines `symbol` in this process: its path
/// (symbolic links resolved) and a handle for find_symbol() (closed with
/// it); an empty path where no shared library defines it.
struct DefiningLibrary {
  std::string path;
  std::unique_ptr<void, int (*)(void*)> handle{nullptr, &::dlclose};
};
inline DefiningLibrary library_defining(const char* symbol) {
  DefiningLibrary library;
  void* address = ::dlsym(RTLD_DEFAULT, symbol);
  Dl_info info{};
  if (address == nullptr || ::dladdr(address, &info) == 0 || info.dli_fname == nullptr)
    return library;
  library.path = resolved_path(info.dli_fname);
  // The library is loaded (the symbol is in it): RTLD_NOLOAD only finds it.
  library.handle.reset(::dlopen(info.dli_fname, RTLD_LAZY | RTLD_NOLOAD));
  return library;
}

}  // namespace ddp::base::detail

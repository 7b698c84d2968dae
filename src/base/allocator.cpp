#include "ddp/base/allocator.hpp"

#include <dlfcn.h>
#include <gnu/libc-version.h>

#include "base/loaded_library.hpp"
#include "base/str.hpp"

namespace ddp::base {
namespace {

using detail::file_name;
using detail::find_symbol;
using detail::str;

}  // namespace

const char* allocator_kind_name(AllocatorKind kind) {
  switch (kind) {
    case AllocatorKind::kGlibc:
      return "glibc malloc";
    case AllocatorKind::kTcmalloc:
      return "tcmalloc";
    case AllocatorKind::kJemalloc:
      return "jemalloc";
    case AllocatorKind::kMimalloc:
      return "mimalloc";
    case AllocatorKind::kUnknown:
      return "unknown allocator";
  }
  return "unknown allocator";
}

HostAllocator allocator_in_use() {
  HostAllocator allocator;
  const detail::DefiningLibrary library = detail::library_defining("malloc");
  if (library.path.empty()) return allocator;  // malloc in the executable itself, a static one's
  allocator.path = library.path;
  void* handle = library.handle.get();
  if (handle == nullptr) return allocator;
  if (auto* version = find_symbol<const char*(int*, int*, const char**)>(handle, "tc_version")) {
    allocator.kind = AllocatorKind::kTcmalloc;
    int major = 0, minor = 0;
    const char* patch = nullptr;
    version(&major, &minor, &patch);
    allocator.version = str(major, ".", minor, patch != nullptr ? patch : "");
  } else if (auto* mallctl =
                 find_symbol<int(const char*, void*, size_t*, void*, size_t)>(handle, "mallctl")) {
    allocator.kind = AllocatorKind::kJemalloc;
    const char* version = nullptr;
    size_t length = sizeof(version);
    if (mallctl("version", &version, &length, nullptr, 0) == 0 && version != nullptr)
      allocator.version = version;
  } else if (auto* version = find_symbol<int()>(handle, "mi_version")) {
    allocator.kind = AllocatorKind::kMimalloc;
    const int v = version();  // 212 is 2.1.2
    allocator.version = str(v / 100, ".", v / 10 % 10, ".", v % 10);
  } else if (file_name(allocator.path).rfind("libc.so", 0) == 0 ||
             file_name(allocator.path).rfind("libc-", 0) == 0) {
    allocator.kind = AllocatorKind::kGlibc;
    allocator.version = gnu_get_libc_version();
  }
  return allocator;
}

std::string HostAllocator::summary() const {
  const bool glibc = kind == AllocatorKind::kGlibc;
  const std::string what = glibc ? "glibc's malloc" : allocator_kind_name(kind);
  const char* origin = glibc ? "glibc " : kind == AllocatorKind::kTcmalloc ? "gperftools " : "";
  const std::string details = version.empty() ? "" : str(" (", origin, version, ")");
  return str("allocator: ", what, details, path.empty() ? "" : " ", path);
}

}  // namespace ddp::base

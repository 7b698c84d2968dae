#include "ddp/base/allocator.hpp"

#include <dlfcn.h>
#include <gnu/libc-version.h>
#include <malloc.h>

#include "base/loaded_library.hpp"
#include "base/str.hpp"

namespace ddp::base {
namespace {

using detail::file_name;
using detail::find_symbol;
using detail::str;

// How release_free_memory() gives freed memory back under the allocator of
// this process, found once.
struct Release {
  AllocatorKind kind = AllocatorKind::kUnknown;
  void (*tcmalloc_release)() = nullptr;
  int (*jemalloc_mallctl)(const char*, void*, size_t*, void*, size_t) = nullptr;
  void (*mimalloc_collect)(bool) = nullptr;
};

Release find_release() {
  Release release;
  const detail::DefiningLibrary library = detail::library_defining("malloc");
  release.kind = allocator_in_use().kind;
  void* handle = library.handle.get();
  if (handle == nullptr) return release;
  switch (release.kind) {
    case AllocatorKind::kTcmalloc:
      release.tcmalloc_release = find_symbol<void()>(handle, "MallocExtension_ReleaseFreeMemory");
      break;
    case AllocatorKind::kJemalloc:
      release.jemalloc_mallctl =
          find_symbol<int(const char*, void*, size_t*, void*, size_t)>(handle, "mallctl");
      break;
    case AllocatorKind::kMimalloc:
      release.mimalloc_collect = find_symbol<void(bool)>(handle, "mi_collect");
      break;
    case AllocatorKind::kGlibc:
    case AllocatorKind::kUnknown:
      break;
  }
  return release;
}

}  // namespace

void release_free_memory() {
  static const Release release = find_release();
  switch (release.kind) {
    case AllocatorKind::kGlibc:
      malloc_trim(0);
      break;
    case AllocatorKind::kTcmalloc:
      if (release.tcmalloc_release) release.tcmalloc_release();
      break;
    case AllocatorKind::kJemalloc:
      // MALLCTL_ARENAS_ALL (4096): every arena.
      if (release.jemalloc_mallctl)
        release.jemalloc_mallctl("arena.4096.purge", nullptr, nullptr, nullptr, 0);
      break;
    case AllocatorKind::kMimalloc:
      if (release.mimalloc_collect) release.mimalloc_collect(true);
      break;
    case AllocatorKind::kUnknown:
      break;
  }
}

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

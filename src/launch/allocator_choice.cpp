#include "launch/allocator_choice.hpp"

#include <dlfcn.h>
#include <gnu/libc-version.h>

#include <filesystem>
#include <sstream>

#include "base/str.hpp"
#include "ddp/base/errors.hpp"

namespace ddp::launch {
namespace {

namespace fs = std::filesystem;
using base::detail::str;

constexpr const char* kTcmallocNames[] = {"libtcmalloc_minimal.so.4", "libtcmalloc.so.4"};
constexpr const char* kInstallTcmalloc =
    "apt-get install libtcmalloc-minimal4, libtcmalloc-minimal4t64 on Debian 13";

std::string find_tcmalloc(const std::vector<std::string>& dirs) {
  for (const char* name : kTcmallocNames) {
    for (const std::string& dir : dirs) {
      std::error_code error;
      const fs::path path = fs::path(dir) / name;
      if (fs::is_regular_file(path, error)) return path.string();
    }
  }
  return "";
}

std::string preloaded_line(const std::string& what, const std::string& path) {
  std::error_code error;
  const fs::path real = fs::canonical(path, error);
  return str("allocator: ", what, " ", error ? path : real.string(),
             ", preloaded into the workers");
}

}  // namespace

std::vector<std::string> library_search_dirs(const EnvironmentMap& env) {
  std::vector<std::string> dirs;
  if (const auto found = env.find("LD_LIBRARY_PATH"); found != env.end()) {
    std::istringstream parts(found->second);
    for (std::string dir; std::getline(parts, dir, ':');)
      if (!dir.empty()) dirs.push_back(dir);
  }
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&gnu_get_libc_version), &info) != 0 &&
      info.dli_fname != nullptr) {
    std::error_code error;
    const fs::path libc = fs::canonical(info.dli_fname, error);
    if (!error) dirs.push_back(libc.parent_path().string());
  }
  return dirs;
}

AllocatorChoice resolve_allocator(const std::string& choice, const EnvironmentMap& env,
                                  const std::vector<std::string>& search_dirs) {
  AllocatorChoice resolved;
  const auto inherited = env.find("LD_PRELOAD");
  const bool preloading = inherited != env.end() && !inherited->second.empty();
  if (choice == "glibc") {
    resolved.summary = preloading ? str("allocator: as LD_PRELOAD=", inherited->second,
                                        " gives it (--allocator glibc preloads nothing)")
                                  : "allocator: glibc's malloc (--allocator glibc)";
    return resolved;
  }
  if (choice == "auto") {
    if (preloading) {
      resolved.summary = str("allocator: as LD_PRELOAD=", inherited->second, " gives it");
      return resolved;
    }
    resolved.preload = find_tcmalloc(search_dirs);
    if (resolved.preload.empty()) {
      resolved.summary = "allocator: glibc's malloc (no tcmalloc installed)";
      resolved.warning = str(
          "warning: the workers allocate with glibc's malloc, which maps and faults every block "
          "above 32 MiB afresh each step (docs/guide/performance.md); install tcmalloc (Debian: ",
          kInstallTcmalloc, ") and ddprun preloads it");
      return resolved;
    }
    resolved.summary = preloaded_line("tcmalloc", resolved.preload);
    return resolved;
  }
  if (choice == "tcmalloc") {
    resolved.preload = find_tcmalloc(search_dirs);
    if (resolved.preload.empty()) {
      std::string dirs;
      for (const std::string& dir : search_dirs) dirs += (dirs.empty() ? "" : ", ") + dir;
      throw ConfigError(str("--allocator tcmalloc: neither ", kTcmallocNames[0], " nor ",
                            kTcmallocNames[1], " is in ", dirs.empty() ? "(no folder)" : dirs,
                            "; install it (Debian: ", kInstallTcmalloc,
                            "), or give --allocator auto or glibc."));
    }
    resolved.summary = preloaded_line("tcmalloc", resolved.preload);
    return resolved;
  }
  if (choice.find('/') == std::string::npos) {
    throw ConfigError(str("--allocator is '", choice,
                          "'; give auto, tcmalloc, glibc, or the path of a shared library that "
                          "defines malloc (e.g. /usr/lib/x86_64-linux-gnu/libjemalloc.so.2)."));
  }
  std::error_code error;
  if (!fs::is_regular_file(choice, error)) {
    throw ConfigError(str("--allocator ", choice,
                          ": no such file; give the path of a shared library that defines malloc, "
                          "or auto, tcmalloc or glibc."));
  }
  resolved.preload = fs::absolute(choice).string();
  resolved.summary = preloaded_line(fs::path(choice).filename().string(), resolved.preload);
  return resolved;
}

std::string worker_preload(const AllocatorChoice& choice, const std::string& inherited) {
  if (choice.preload.empty()) return inherited;
  return inherited.empty() ? choice.preload : choice.preload + ":" + inherited;
}

}  // namespace ddp::launch

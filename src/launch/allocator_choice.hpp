#pragma once

// Internal: ddprun's --allocator (the host allocator preloaded into every
// worker, Note [The host allocator] in ddp/base/allocator.hpp), resolved.

#include <string>
#include <vector>

#include "ddp/comm/environment.hpp"

namespace ddp::launch {

/// What --allocator resolves to on this node.
struct AllocatorChoice {
  /// The library put first in the workers' LD_PRELOAD; "" for none.
  std::string preload;
  /// The job's log line ("allocator: tcmalloc ... preloaded into the workers").
  std::string summary;
  /// "" or one line naming the fix (auto found no tcmalloc).
  std::string warning;
};

/// Resolves `choice`: "auto" (tcmalloc where installed, else glibc's malloc
/// with a warning; a non-empty LD_PRELOAD in `env` is left as it is),
/// "tcmalloc" (it must be installed), "glibc" (nothing preloaded) or the
/// path of a shared library that defines malloc. tcmalloc is looked for
/// (libtcmalloc_minimal.so.4, then libtcmalloc.so.4) in `search_dirs`.
/// \throws ddp::ConfigError for an unknown choice, a tcmalloc that is not
/// installed, or a path that is not a file, naming the fix.
AllocatorChoice resolve_allocator(const std::string& choice, const EnvironmentMap& env,
                                  const std::vector<std::string>& search_dirs);

/// Where resolve_allocator() looks for tcmalloc: LD_LIBRARY_PATH's folders
/// in `env`, then the folder of the C library this process runs on (the
/// system's library folder, /usr/lib/x86_64-linux-gnu on Debian x86-64).
std::vector<std::string> library_search_dirs(const EnvironmentMap& env);

/// The workers' LD_PRELOAD: the choice's library before the inherited value
/// `inherited` ("" where none); "" where neither names one.
std::string worker_preload(const AllocatorChoice& choice, const std::string& inherited);

}  // namespace ddp::launch

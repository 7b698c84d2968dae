#pragma once

// libFuzzer targets for ddp's file readers (scripts/fuzz-readers.sh): each
// input is written to a file and read as a user's file would be. A reader
// may refuse it only with its own named error (`Refusal`); anything else
// (another exception, a crash, a leak, an allocation above libFuzzer's
// -malloc_limit_mb, a hang) is a finding.

#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace ddp::fuzz {

/// The input as a file of its own, in $DDP_FUZZ_DIR (else /tmp), named
/// `suffix` (the readers do not look at names, but users' files have them).
inline const std::string& input_path(const char* suffix) {
  static const std::string path = [&] {
    const char* dir = std::getenv("DDP_FUZZ_DIR");
    return std::string(dir ? dir : "/tmp") + "/ddp-fuzz-input-" + std::to_string(::getpid()) +
           suffix;
  }();
  return path;
}

/// Writes `data` to `path`, replacing what was there.
inline void write_input(const std::string& path, const uint8_t* data, size_t size) {
  FILE* file = std::fopen(path.c_str(), "wb");
  if (!file) std::abort();
  if (size > 0 && std::fwrite(data, 1, size, file) != size) std::abort();
  std::fclose(file);
}

/// Runs `read(path)` on the input; `Refusal` is the reader's named error.
template <typename Refusal, typename Read>
int read_input(const char* suffix, const uint8_t* data, size_t size, Read&& read) {
  const std::string& path = input_path(suffix);
  write_input(path, data, size);
  try {
    read(path);
  } catch (const Refusal&) {
  }
  return 0;
}

}  // namespace ddp::fuzz

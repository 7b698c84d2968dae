#pragma once

// This process's resident memory from /proc/self/status, and a way to start
// its peak (VmHWM) over, for tests that bound what an operation holds.

#include <malloc.h>

#include <cstdint>
#include <fstream>
#include <string>

namespace ddp::testing {

/// A /proc/self/status field in bytes ("VmRSS", "VmHWM"); -1 if absent.
inline int64_t status_bytes(const std::string& key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::stoll(line.substr(key.size() + 1)) * 1024;
  }
  return -1;
}

/// Starts a new peak RSS (VmHWM) at the current RSS.
inline void reset_peak_rss() { std::ofstream("/proc/self/clear_refs") << "5"; }

/// How far the RSS rose above where it was while `run` ran. Blocks of 128 KiB
/// and more are mapped and unmapped by themselves (glibc would otherwise
/// raise its mmap threshold after the first free and keep freed blocks), so
/// a buffer freed before the end still counts and nothing kept from before
/// does.
template <typename Run>
int64_t peak_growth(Run&& run) {
  mallopt(M_MMAP_THRESHOLD, 128 * 1024);
  malloc_trim(0);
  reset_peak_rss();
  const int64_t before = status_bytes("VmRSS");
  run();
  return status_bytes("VmHWM") - before;
}

/// The peak and the lasting growth of the RSS while `run` ran, under the
/// allocator as it is (glibc's mmap threshold left as the process has it,
/// as under torchrun or mpirun): freed blocks the allocator keeps count.
struct Growth {
  int64_t peak = 0;     ///< VmHWM during `run` above the RSS before
  int64_t lasting = 0;  ///< the RSS after `run` above the RSS before
};
template <typename Run>
Growth growth_as_allocated(Run&& run) {
  reset_peak_rss();
  const int64_t before = status_bytes("VmRSS");
  run();
  return {status_bytes("VmHWM") - before, status_bytes("VmRSS") - before};
}

}  // namespace ddp::testing

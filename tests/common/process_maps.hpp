#pragma once

// Whether a file is mapped in this test process (/proc/self/maps): the
// independent answer the BLAS and allocator tests check their library against.

#include <fstream>
#include <string>

namespace ddp::testing {

/// Whether a line of /proc/self/maps ends in `path`.
inline bool mapped_in_this_process(const std::string& path) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.size() >= path.size() && line.compare(line.size() - path.size(), path.npos, path) == 0)
      return true;
  return false;
}

}  // namespace ddp::testing

#pragma once

// A file's whole text, for tests that compare what a program wrote.

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

namespace ddp::testing {

/// The contents of `path`; empty when it cannot be opened (a test then
/// fails on the comparison that follows, naming the path).
inline std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

}  // namespace ddp::testing

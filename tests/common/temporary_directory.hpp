#pragma once

// A directory of a test's own, gone with it: created empty under TMPDIR (or
// /tmp) with a unique name by mkdtemp, removed with everything in it when
// the object is destroyed, whether the test passed, failed or returned
// early from an assertion.

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <system_error>
#include <utility>

namespace ddp::testing {

/// A unique directory under TMPDIR, removed with everything in it by the
/// destructor.
class TemporaryDirectory {
 public:
  /// Creates <TMPDIR>/<prefix>XXXXXX; throws std::runtime_error, naming
  /// the path and the reason, when it cannot.
  explicit TemporaryDirectory(const std::string& prefix = "ddp-test-") {
    std::string pattern = (std::filesystem::temp_directory_path() / (prefix + "XXXXXX")).string();
    if (::mkdtemp(pattern.data()) == nullptr) {
      throw std::runtime_error("cannot create a temporary directory " + pattern + ": " +
                               std::strerror(errno));
    }
    path_ = pattern;
  }

  /// Removes the directory and everything in it (what is already gone is
  /// no error).
  ~TemporaryDirectory() {
    if (path_.empty()) return;
    std::error_code ignored;
    std::filesystem::remove_all(path_, ignored);
  }

  TemporaryDirectory(const TemporaryDirectory&) = delete;
  TemporaryDirectory& operator=(const TemporaryDirectory&) = delete;
  /// Hands the directory on: `other` no longer removes it.
  TemporaryDirectory(TemporaryDirectory&& other) noexcept : path_(std::move(other.path_)) {
    other.path_.clear();
  }
  TemporaryDirectory& operator=(TemporaryDirectory&&) = delete;

  /// The directory.
  const std::filesystem::path& path() const noexcept { return path_; }

  /// The directory as a string.
  std::string string() const { return path_.string(); }

  /// path() / name as a string, for a file or directory inside.
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace ddp::testing

#include "formats/atomic_file.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "base/str.hpp"
#include "ddp/formats/errors.hpp"

namespace ddp::formats::detail {

namespace fs = std::filesystem;

namespace {

// fsyncs the directory `path`, so that the rename in it is durable.
void fsync_directory(const std::string& path, const std::string& target) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  const int rc = fd < 0 ? -1 : ::fsync(fd);
  const std::string error = std::strerror(errno);
  if (fd >= 0) ::close(fd);
  if (rc != 0)
    throw FormatError("wrote " + target + " but cannot fsync its directory " + path + ": " + error);
}

}  // namespace

void write_atomically(const std::string& path, const std::string& what,
                      const std::function<void(const ByteSink&)>& produce) {
  const fs::path target(path);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string temp = (dir / ("." + target.filename().string() + ".tmp")).string();
  auto fail = [&](const std::string& cause) {
    throw FormatError("cannot write " + what + " " + path + ": " + cause);
  };
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) fail(base::detail::str("open(", temp, ") failed: ", std::strerror(errno)));
  std::string write_error;
  const ByteSink sink = [&](const void* data, size_t size) -> size_t {
    const char* bytes = static_cast<const char*>(data);
    for (size_t done = 0; done < size;) {
      const ssize_t n = ::write(fd, bytes + done, size - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (write_error.empty()) write_error = std::string("write failed: ") + std::strerror(errno);
        return 0;
      }
      done += static_cast<size_t>(n);
    }
    return size;
  };
  try {
    try {
      produce(sink);
    } catch (const FormatError&) {
      if (write_error.empty()) throw;
      fail(write_error);
    } catch (const std::exception& e) {
      fail(write_error.empty() ? e.what() : write_error);
    }
    if (!write_error.empty()) fail(write_error);
    if (::fsync(fd) != 0) fail(base::detail::str("fsync failed: ", std::strerror(errno)));
  } catch (...) {
    ::close(fd);
    std::remove(temp.c_str());
    throw;
  }
  if (::close(fd) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(temp.c_str());
    fail("close failed: " + why);
  }
  if (std::rename(temp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(temp.c_str());
    fail("rename from " + temp + " failed: " + why);
  }
  fsync_directory(dir.string(), path);
}

}  // namespace ddp::formats::detail

#include "comm/store/job_secret.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "base/str.hpp"
#include "comm/store/handshake.hpp"
#include "ddp/base/errors.hpp"

namespace ddp::comm::store {
namespace {

constexpr std::size_t kMinSecretBytes = 16;
constexpr std::size_t kGeneratedBytes = 32;

std::string hex(const std::string& bytes) {
  static const char* const kDigits = "0123456789abcdef";
  std::string text;
  for (unsigned char byte : bytes) {
    text.push_back(kDigits[byte >> 4]);
    text.push_back(kDigits[byte & 15]);
  }
  return text;
}

}  // namespace

std::string read_job_secret(const std::string& path) {
  struct stat info {};
  if (::stat(path.c_str(), &info) != 0) {
    throw ConfigError("cannot read the job secret file '" + path + "' (" + std::strerror(errno) +
                      "). Give the path of an existing file, e.g. made " +
                      "with `head -c 32 /dev/urandom | base64 > job.secret; chmod 600 " +
                      "job.secret`.");
  }
  if ((info.st_mode & (S_IRWXG | S_IRWXO)) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(info.st_mode & 07777));
    throw ConfigError("the job secret file '" + path + "' has mode " + mode +
                      ": group or others may read it, so it protects nothing. Run `chmod 600 " +
                      path + "`.");
  }
  std::ifstream file(path, std::ios::binary);
  std::ostringstream content;
  content << file.rdbuf();
  if (!file) {
    throw ConfigError("cannot read the job secret file '" + path +
                      "'; check that it is a regular file this user can read.");
  }
  std::string secret = content.str();
  while (!secret.empty() && std::isspace(static_cast<unsigned char>(secret.back()))) {
    secret.pop_back();
  }
  if (secret.size() < kMinSecretBytes) {
    throw ConfigError(base::detail::str("the job secret file '", path, "' holds ", secret.size(),
                                        " bytes; a secret needs at least ", kMinSecretBytes,
                                        ". Make one with `head -c 32 /dev/urandom | base64 > ",
                                        path, "`."));
  }
  return secret;
}

std::string write_job_secret(const std::string& directory) {
  const std::string path = directory + "/job.secret";
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    throw IoError("cannot create the job secret file " + path + " (" + std::strerror(errno) +
                  "); check that " + directory + " is writable.");
  }
  const std::string text = hex(random_bytes(kGeneratedBytes)) + "\n";
  const bool written = ::write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  const int error = errno;
  ::close(fd);
  if (!written) {
    throw IoError("cannot write the job secret file " + path + " (" + std::strerror(error) +
                  "); check the free space in " + directory + ".");
  }
  return path;
}

}  // namespace ddp::comm::store

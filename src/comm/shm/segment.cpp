#include "comm/shm/segment.hpp"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <random>

#include "base/str.hpp"
#include "ddp/base/errors.hpp"

namespace ddp::comm::shm {
namespace {

constexpr const char* kPrefix = "/ddp-shm-";

std::string system_error(const std::string& what, const std::string& name, int error) {
  return what + " '" + name + "' failed: " + std::strerror(error) +
         ". Check that /dev/shm is mounted and has room (df -h /dev/shm); containers often "
         "need a larger --shm-size.";
}

char* map_segment(int fd, size_t bytes, const std::string& name) {
  void* data = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int error = errno;
  close(fd);
  if (data == MAP_FAILED)
    throw BackendUnavailableError(system_error("mapping shared memory", name, error));
  return static_cast<char*>(data);
}

}  // namespace

Segment::Segment(std::string name, char* data, size_t size, bool owner)
    : name_(std::move(name)), data_(data), size_(size), owner_(owner) {}

Segment Segment::create(const std::string& name, size_t bytes) {
  const int fd = shm_open(name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
  if (fd < 0) throw BackendUnavailableError(system_error("creating shared memory", name, errno));
  if (ftruncate(fd, static_cast<off_t>(bytes)) != 0) {
    const int error = errno;
    close(fd);
    shm_unlink(name.c_str());
    throw BackendUnavailableError(
        system_error(base::detail::str("sizing shared memory (", bytes, " bytes)"), name, error));
  }
  try {
    return Segment(name, map_segment(fd, bytes, name), bytes, /*owner=*/true);
  } catch (...) {
    shm_unlink(name.c_str());
    throw;
  }
}

Segment Segment::open(const std::string& name, size_t bytes) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0600);
  if (fd < 0) throw BackendUnavailableError(system_error("opening shared memory", name, errno));
  struct stat info {};
  if (fstat(fd, &info) != 0 || static_cast<size_t>(info.st_size) < bytes) {
    close(fd);
    throw BackendUnavailableError(base::detail::str(
        "shared memory '", name, "' is smaller than the ", bytes,
        " bytes its creator announced; another job may use the same name. Restart the job."));
  }
  return Segment(name, map_segment(fd, bytes, name), bytes, /*owner=*/false);
}

Segment::Segment(Segment&& other) noexcept { *this = std::move(other); }

Segment& Segment::operator=(Segment&& other) noexcept {
  if (this != &other) {
    this->~Segment();
    name_ = std::move(other.name_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
    owner_ = std::exchange(other.owner_, false);
  }
  return *this;
}

Segment::~Segment() {
  if (owner_) unlink();
  if (data_) munmap(data_, size_);
  data_ = nullptr;
}

void Segment::unlink() {
  if (owner_) shm_unlink(name_.c_str());
  owner_ = false;
}

const char* segment_name_prefix() noexcept { return kPrefix; }

std::string fresh_segment_name() {
  std::random_device device;
  std::mt19937_64 random((static_cast<uint64_t>(device()) << 32) ^ device());
  char suffix[17];
  std::snprintf(suffix, sizeof(suffix), "%016llx", static_cast<unsigned long long>(random()));
  return base::detail::str(kPrefix, getpid(), "-", suffix);
}

int sweep_stale_segments(const std::string& directory) {
  DIR* dir = opendir(directory.c_str());
  if (!dir) return 0;
  const std::string prefix = kPrefix + 1;  // Directory entries have no '/'.
  int removed = 0;
  while (dirent* entry = readdir(dir)) {
    const std::string name = entry->d_name;
    if (name.compare(0, prefix.size(), prefix) != 0) continue;
    const long pid = std::strtol(name.c_str() + prefix.size(), nullptr, 10);
    if (pid <= 0) continue;
    if (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;
    if (shm_unlink(("/" + name).c_str()) == 0) ++removed;
  }
  closedir(dir);
  return removed;
}

}  // namespace ddp::comm::shm

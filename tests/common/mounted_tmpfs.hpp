#pragma once

// A real small filesystem of a test's own: a tmpfs of a given size mounted
// on a fresh temporary directory, unmounted and removed with the object. A
// write past its size fails with ENOSPC as on a full disk. Mounting needs
// CAP_SYS_ADMIN (root, as CI's legs and the Debian 13 root run); elsewhere
// cannot_mount() says why, for the test's skip.

#include <sys/mount.h>
#include <sys/statvfs.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "common/temporary_directory.hpp"

namespace ddp::testing {

class MountedTmpfs {
 public:
  /// Mounts a tmpfs of `bytes` (rounded up to pages) on a new directory;
  /// mounted() is false, and cannot_mount() the reason, where it cannot.
  explicit MountedTmpfs(int64_t bytes) : directory_("ddp-tmpfs-") {
    const std::string options = "size=" + std::to_string(bytes) + ",mode=0755";
    if (::mount("tmpfs", directory_.string().c_str(), "tmpfs", MS_NOSUID | MS_NODEV,
                options.c_str()) != 0) {
      why_not_ = "cannot mount a " + std::to_string(bytes) + "-byte tmpfs on " +
                 directory_.string() + ": " + std::strerror(errno) +
                 " (mounting needs CAP_SYS_ADMIN: run as root)";
      return;
    }
    mounted_ = true;
  }
  ~MountedTmpfs() {
    if (mounted_) ::umount2(directory_.string().c_str(), MNT_DETACH);
  }
  MountedTmpfs(const MountedTmpfs&) = delete;
  MountedTmpfs& operator=(const MountedTmpfs&) = delete;

  bool mounted() const { return mounted_; }
  const std::string& cannot_mount() const { return why_not_; }
  std::string string() const { return directory_.string(); }

  /// The bytes still free on the filesystem at `path`.
  static int64_t free_bytes(const std::string& path) {
    struct statvfs fs {};
    if (::statvfs(path.c_str(), &fs) != 0) return -1;
    return static_cast<int64_t>(fs.f_bavail) * static_cast<int64_t>(fs.f_frsize);
  }

  /// Fills the filesystem at `directory` with `file` until at most `leave`
  /// bytes are free; returns the bytes then free.
  static int64_t fill(const std::string& directory, const std::string& file, int64_t leave) {
    std::ofstream out(directory + "/" + file, std::ios::binary | std::ios::trunc);
    const std::vector<char> block(4096, 'x');
    while (free_bytes(directory) > leave && out.write(block.data(), block.size())) out.flush();
    return free_bytes(directory);
  }

 private:
  TemporaryDirectory directory_;
  bool mounted_ = false;
  std::string why_not_;
};

}  // namespace ddp::testing

// libddp_test_failing_writes.so: preloaded (LD_PRELOAD) into a test's
// processes, it makes writes to the files under one directory fail part
// way with EIO, as a disk with a bad sector fails them, where the machine
// offers no device-mapper to fail a real block device (dm-error).
//
//   DDP_TEST_FAIL_WRITES_UNDER=DIR   the directory (its files, at any depth)
//   DDP_TEST_FAIL_WRITES_AT=BYTES    the offset in a file from which writes
//                                    fail (default 16384)
//
// Armed while the file DIR/.fail-writes exists, so that a test writes its
// good checkpoint first and every process of the job sees the switch at
// once. A write that crosses the offset writes the bytes before it and
// returns their count; the next one returns -1 with errno EIO. write(),
// pwrite() and writev() are covered (what ddp's writers call); anything
// outside DIR, and DIR/.fail-writes itself, passes through.

#include <dlfcn.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace {

using WriteFunction = ssize_t (*)(int, const void*, size_t);
using PwriteFunction = ssize_t (*)(int, const void*, size_t, off_t);
using WritevFunction = ssize_t (*)(int, const iovec*, int);

WriteFunction real_write = nullptr;
PwriteFunction real_pwrite = nullptr;
WritevFunction real_writev = nullptr;

void resolve() {
  if (real_write != nullptr) return;
  real_write = reinterpret_cast<WriteFunction>(dlsym(RTLD_NEXT, "write"));
  real_pwrite = reinterpret_cast<PwriteFunction>(dlsym(RTLD_NEXT, "pwrite"));
  real_writev = reinterpret_cast<WritevFunction>(dlsym(RTLD_NEXT, "writev"));
}

// The offset from which writes to `fd` fail, or -1 where they do not.
long long limit_for(int fd) {
  const char* under = getenv("DDP_TEST_FAIL_WRITES_UNDER");
  if (under == nullptr || *under == '\0') return -1;
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) return -1;
  char link[64];
  char path[PATH_MAX];
  std::snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  const ssize_t n = readlink(link, path, sizeof path - 1);
  if (n <= 0) return -1;
  path[n] = '\0';
  const size_t length = std::strlen(under);
  if (std::strncmp(path, under, length) != 0 || path[length] != '/') return -1;
  char armed[PATH_MAX];
  std::snprintf(armed, sizeof armed, "%s/.fail-writes", under);
  if (std::strcmp(path, armed) == 0 || access(armed, F_OK) != 0) return -1;
  const char* at = std::getenv("DDP_TEST_FAIL_WRITES_AT");
  return at != nullptr ? std::atoll(at) : 16384;
}

// How many of `size` bytes at `offset` may be written: all, some, or none
// (-1 with EIO).
ssize_t allowed(long long limit, long long offset, size_t size) {
  if (limit < 0 || offset + static_cast<long long>(size) <= limit) {
    return static_cast<ssize_t>(size);
  }
  if (offset < limit) return static_cast<ssize_t>(limit - offset);
  errno = EIO;
  return -1;
}

}  // namespace

extern "C" {

ssize_t write(int fd, const void* data, size_t size) {
  resolve();
  const long long limit = limit_for(fd);
  if (limit >= 0) {
    const ssize_t n = allowed(limit, lseek(fd, 0, SEEK_CUR), size);
    if (n < 0) return -1;
    size = static_cast<size_t>(n);
  }
  return real_write(fd, data, size);
}

ssize_t pwrite(int fd, const void* data, size_t size, off_t offset) {
  resolve();
  const long long limit = limit_for(fd);
  if (limit >= 0) {
    const ssize_t n = allowed(limit, offset, size);
    if (n < 0) return -1;
    size = static_cast<size_t>(n);
  }
  return real_pwrite(fd, data, size, offset);
}

ssize_t pwrite64(int fd, const void* data, size_t size, off_t offset) {
  return pwrite(fd, data, size, offset);
}

ssize_t writev(int fd, const iovec* iov, int count) {
  resolve();
  const long long limit = limit_for(fd);
  if (limit >= 0) {
    size_t total = 0;
    for (int i = 0; i < count; ++i) total += iov[i].iov_len;
    if (allowed(limit, lseek(fd, 0, SEEK_CUR), total) != static_cast<ssize_t>(total)) {
      // The part before the offset goes through write(), which stops there.
      return count > 0 ? write(fd, iov[0].iov_base, iov[0].iov_len) : 0;
    }
  }
  return real_writev(fd, iov, count);
}

}  // extern "C"

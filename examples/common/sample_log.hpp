#pragma once

// --sample-log DIR: which samples each worker process took, written by the
// process itself to DIR/samples-<pid>.log, one line per event with a single
// write() to a file opened O_APPEND, so that neither a launcher's relay of
// stdout and stderr nor a SIGKILL reorders or loses a line once written.
// Note [Accounting for every sample] in tests/elastic/sample_accounting.hpp
// reads it:
//
//   generation rank R world W from_step S start_ns T   (as a generation starts)
//   epoch E step S samples I I ...                      (before the step trains)
//
// A batch is logged before its forward: a worker lost during step S has
// logged it, and step S counts only if the job kept a commit after it, which
// needs every rank's part of the step, the lost one's too.

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "ddp/base/errors.hpp"

namespace ddp::examples {

class SampleLog {
 public:
  /// Logs nothing with an empty `dir`.
  explicit SampleLog(const std::string& dir) {
    if (dir.empty()) return;
    const std::string path = dir + "/samples-" + std::to_string(::getpid()) + ".log";
    fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd_ < 0) {
      throw ddp::IoError("cannot open the sample log " + path + ": " + std::strerror(errno) +
                         "; check that --sample-log names a writable directory");
    }
  }
  ~SampleLog() {
    if (fd_ >= 0) ::close(fd_);
  }
  SampleLog(const SampleLog&) = delete;
  SampleLog& operator=(const SampleLog&) = delete;

  /// A generation of the job starts training here, as rank `rank` of
  /// `world`, after `from_step` steps (0, or its commit's).
  void generation(int rank, int world, int64_t from_step) {
    const auto now = std::chrono::steady_clock::now().time_since_epoch();
    write("generation rank " + std::to_string(rank) + " world " + std::to_string(world) +
          " from_step " + std::to_string(from_step) + " start_ns " +
          std::to_string(std::chrono::duration_cast<std::chrono::nanoseconds>(now).count()));
  }

  /// Global step `step` (counted from 1) of epoch `epoch` trains `batch`.
  void batch(int64_t epoch, int64_t step, const std::vector<int64_t>& batch) {
    std::string line =
        "epoch " + std::to_string(epoch) + " step " + std::to_string(step) + " samples";
    for (int64_t i : batch) line += " " + std::to_string(i);
    write(line);
  }

 private:
  void write(std::string line) {
    if (fd_ < 0) return;
    line += '\n';
    // One write() of a regular file opened O_APPEND: the line lands whole.
    for (size_t done = 0; done < line.size();) {
      const ssize_t n = ::write(fd_, line.data() + done, line.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        throw ddp::IoError("cannot write the sample log: " + std::string(std::strerror(errno)) +
                           "; check the disk under --sample-log");
      }
      done += static_cast<size_t>(n);
    }
  }

  int fd_ = -1;
};

}  // namespace ddp::examples

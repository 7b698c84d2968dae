#include "launch/rank_output.hpp"

#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <system_error>

#include "base/str.hpp"
#include "ddp/base/errors.hpp"

namespace ddp::launch {

RankOutput::RankOutput(int rank, const std::string& log_dir, unsigned to_files, unsigned to_console)
    : prefix_(base::detail::str("[", rank, "] ")), console_(to_console) {
  if (to_files == 0) return;
  std::error_code error;
  std::filesystem::create_directories(log_dir, error);
  if (error) {
    throw IoError("cannot create the log directory " + log_dir + ": " + error.message() +
                  "; check that --log-dir is writable");
  }
  const char* names[2] = {"stdout.log", "stderr.log"};
  for (int i = 0; i < 2; ++i) {
    if ((to_files >> i & 1) == 0) continue;
    const std::string path = log_dir + "/" + names[i];
    logs_[i] = std::fopen(path.c_str(), "a");
    if (!logs_[i]) {
      const int code = errno;
      if (logs_[0]) std::fclose(logs_[0]);  // The destructor does not run.
      throw IoError("cannot open the log file " + path + ": " + std::strerror(code) +
                    "; check that --log-dir is writable");
    }
  }
}

RankOutput::RankOutput(const std::string& label, unsigned to_console)
    : prefix_("[" + label + "] "), console_(to_console) {}

RankOutput::RankOutput(RankOutput&& other) noexcept
    : prefix_(std::move(other.prefix_)), console_(other.console_) {
  for (int i = 0; i < 2; ++i) {
    logs_[i] = other.logs_[i];
    other.logs_[i] = nullptr;
    partial_[i] = std::move(other.partial_[i]);
  }
}

RankOutput::~RankOutput() {
  flush();
  for (auto* log : logs_) {
    if (log) std::fclose(log);
  }
}

void RankOutput::feed(Stream stream, std::string_view chunk) {
  std::string& partial = partial_[static_cast<int>(stream)];
  partial.append(chunk);
  size_t start = 0;
  for (size_t newline; (newline = partial.find('\n', start)) != std::string::npos;) {
    emit(stream, std::string_view(partial).substr(start, newline + 1 - start));
    start = newline + 1;
  }
  partial.erase(0, start);
}

void RankOutput::relabel(int rank) { prefix_ = base::detail::str("[", rank, "] "); }

void RankOutput::flush() {
  for (int i = 0; i < 2; ++i) {
    if (partial_[i].empty()) continue;
    partial_[i] += '\n';
    emit(static_cast<Stream>(i), partial_[i]);
    partial_[i].clear();
  }
}

void RankOutput::emit(Stream stream, std::string_view line) {
  const int index = static_cast<int>(stream);
  if (logs_[index]) {
    std::fwrite(line.data(), 1, line.size(), logs_[index]);
    std::fflush(logs_[index]);
  }
  if ((console_ >> index & 1) == 0) return;
  // One write() per line: POSIX keeps writes to a pipe up to PIPE_BUF
  // atomic, and a terminal or file gets whole lines in order.
  const std::string text = prefix_ + std::string(line);
  const int fd = stream == Stream::kStdout ? STDOUT_FILENO : STDERR_FILENO;
  size_t written = 0;
  while (written < text.size()) {
    ssize_t n = write(fd, text.data() + written, text.size() - written);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    written += static_cast<size_t>(n);
  }
}

}  // namespace ddp::launch

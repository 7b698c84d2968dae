#pragma once

// Internal: a worker's output as the launcher shows it: whole lines, each
// prefixed with the worker's rank, never interleaved mid-line with another
// worker's; optionally also written to per-rank log files.

#include <cstdio>
#include <string>
#include <string_view>

#include "ddp/launch/child_process.hpp"

namespace ddp::launch {

/// Splits one worker's output into lines and writes each, prefixed with
/// "[rank] ", to the console in a single write() (so lines of different
/// workers never mix), and/or appends it unprefixed to a log file.
class RankOutput {
 public:
  /// Where each stream goes: bit 0 is stdout, bit 1 stderr. A stream in
  /// `to_files` goes to `log_dir`/stdout.log or stderr.log, one in
  /// `to_console` to the console (torchrun's --redirects and --tee).
  /// \throws ddp::IoError when the directory or a log file cannot be
  ///   created.
  RankOutput(int rank, const std::string& log_dir, unsigned to_files, unsigned to_console);
  /// The output of a process with no rank yet (a hot spare): its `to_console`
  /// streams, each line prefixed "[label] ".
  RankOutput(const std::string& label, unsigned to_console);
  ~RankOutput();
  RankOutput(RankOutput&& other) noexcept;
  RankOutput(const RankOutput&) = delete;
  RankOutput& operator=(const RankOutput&) = delete;
  RankOutput& operator=(RankOutput&&) = delete;

  /// Takes a chunk of the worker's `stream`.
  void feed(Stream stream, std::string_view chunk);
  /// Emits a last line that had no newline.
  void flush();
  /// Prefixes the lines that follow with "[rank] ": the worker was seated
  /// at another rank.
  void relabel(int rank);

 private:
  void emit(Stream stream, std::string_view line);

  std::string prefix_;
  unsigned console_;
  std::FILE* logs_[2] = {nullptr, nullptr};
  std::string partial_[2];
};

}  // namespace ddp::launch

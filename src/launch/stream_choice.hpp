#pragma once

// Internal: torchrun's --redirects and --tee values (which streams of which
// local ranks go to log files), parsed.

#include <map>
#include <string>

namespace ddp::launch {

/// torchrun's --redirects/--tee values, resolved: for each local rank,
/// which streams (bit 0 stdout, bit 1 stderr; torchrun's 0 to 3).
class StreamChoice {
 public:
  StreamChoice() = default;
  /// Parses "3" (every local rank) or "0:1,1:2" (ranks not named: 0).
  /// \throws ddp::ConfigError naming `option` and the bad value.
  static StreamChoice parse(const std::string& text, const std::string& option);
  /// Whether local rank `local_rank`'s `stdout_or_stderr` (0 or 1) is chosen.
  bool has(int local_rank, int stdout_or_stderr) const;
  /// Whether any local rank has any stream chosen.
  bool any() const { return all_ != 0 || !by_rank_.empty(); }

 private:
  int all_ = 0;
  std::map<int, int> by_rank_;
};

}  // namespace ddp::launch

#pragma once

// Internal: starting child processes and waiting for them with a deadline.
// Used by the multi-process tests and the all-reduce self-check; every wait
// is bounded, and no child outlives the call.

#include <sys/types.h>

#include <chrono>
#include <map>
#include <string>
#include <vector>

namespace ddp::launch {

/// One child to start.
struct ChildSpec {
  /// Program and arguments; argv[0] is the path of the program.
  std::vector<std::string> argv;
  /// Variables set (or replaced) on top of this process's environment.
  std::map<std::string, std::string> env;
  /// Variables removed from the inherited environment.
  std::vector<std::string> unset_env;
};

/// How a child ended.
struct ChildResult {
  pid_t pid = -1;
  /// Exit status when it exited; -1 when it died by a signal.
  int exit_code = -1;
  /// The signal that ended it, or 0.
  int term_signal = 0;
  /// True when the deadline passed and the child had to be stopped.
  bool killed_at_deadline = false;
  /// Its standard output and standard error, interleaved as written.
  std::string output;
  /// Seconds from start to exit.
  double seconds = 0;

  /// "exit 0", "signal 9 (Killed)", "killed at the deadline".
  std::string status() const;
};

/// Starts every child at once, collects its output, and waits until all have
/// exited or `deadline` has passed. Children still running then get SIGTERM,
/// and SIGKILL after `grace`. Each child runs in its own process group (all
/// of it is signalled) and is killed if this process dies.
std::vector<ChildResult> runChildren(const std::vector<ChildSpec>& children,
                                     std::chrono::milliseconds deadline,
                                     std::chrono::milliseconds grace = std::chrono::seconds(2));

/// A TCP port on 127.0.0.1 that was free when asked.
int findFreePort();

}  // namespace ddp::launch

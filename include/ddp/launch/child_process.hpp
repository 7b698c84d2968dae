#pragma once

// Internal: child processes with captured output, and waiting for a set of
// them with a deadline. Used by the launcher (ddprun), the multi-process
// tests and the all-reduce self-check; no child outlives its parent.

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "ddp/launch/errors.hpp"

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

/// Which of a child's streams a chunk of output came from.
enum class Stream { kStdout, kStderr };

/// A running child in its own process group, killed if this process dies,
/// with its standard output and error captured through pipes.
class ChildProcess {
 public:
  /// Starts `spec`. With `separate_stderr` false, both streams arrive as
  /// kStdout, interleaved as written.
  /// \throws ddp::LaunchError when the child cannot be started (no pipe for
  ///   its output, fork failed; a missing program exits 127 instead);
  ///   ddp::InvalidArgumentError when spec.argv is empty.
  ChildProcess(const ChildSpec& spec, bool separate_stderr);
  ~ChildProcess();
  ChildProcess(ChildProcess&& other) noexcept;
  ChildProcess& operator=(ChildProcess&&) = delete;
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  pid_t pid() const { return pid_; }
  /// Hands whatever output is available to `sink` (never blocks).
  void pump(const std::function<void(Stream, std::string_view)>& sink);
  /// The pipes still open, to poll() on.
  std::vector<int> open_pipes() const;
  /// Reaps the child if it has exited (never blocks); true once it has.
  bool reap();
  /// Waits for the child to exit.
  void reap_blocking();
  bool exited() const { return exited_; }
  /// True once exited and both pipes are drained and closed.
  bool finished() const;
  /// Exit status, or -1 when it died by a signal.
  int exit_code() const { return exit_code_; }
  /// The signal that ended it, or 0.
  int term_signal() const { return term_signal_; }
  /// Sends `signal` to the child's whole process group.
  void signal_group(int signal) const;
  /// Seconds from start to exit (or to now).
  double seconds() const;

 private:
  pid_t pid_ = -1;
  int fds_[2] = {-1, -1};
  bool exited_ = false;
  int exit_code_ = -1;
  int term_signal_ = 0;
  std::chrono::steady_clock::time_point started_, ended_;
};

/// How a child ended, with everything it wrote.
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

/// A human-readable exit status: "exit 3", "signal 9 (Killed)".
std::string describe_exit(int exit_code, int term_signal);

/// Waits up to `timeout` for any of `children`'s pipes to have output.
void wait_for_output(const std::vector<ChildProcess*>& children, std::chrono::milliseconds timeout);

/// Stops `children`: SIGTERM to each process group still running, then
/// SIGKILL to those still running after `grace`; returns once all exited.
/// `pump` is called meanwhile so that no output is lost.
void stop_all(std::vector<ChildProcess*> children, std::chrono::milliseconds grace,
              const std::function<void(ChildProcess&)>& pump);

/// Starts every child at once, collects its output, and waits until all have
/// exited or `deadline` has passed; then SIGTERM, and SIGKILL after `grace`.
std::vector<ChildResult> run_children(const std::vector<ChildSpec>& children,
                                      std::chrono::milliseconds deadline,
                                      std::chrono::milliseconds grace = std::chrono::seconds(2));

}  // namespace ddp::launch

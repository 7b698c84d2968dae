#include "ddp/launch/child_process.hpp"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include "base/str.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/environment.hpp"
#include "ddp/launch/errors.hpp"

namespace ddp::launch {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<std::string> child_environment(const ChildSpec& spec) {
  EnvironmentMap merged = capture_environment();
  for (const auto& name : spec.unset_env) merged.erase(name);
  for (const auto& [name, value] : spec.env) merged[name] = value;
  std::vector<std::string> lines;
  for (const auto& [name, value] : merged) lines.push_back(name + "=" + value);
  return lines;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> result;
  for (auto& s : strings) result.push_back(s.data());
  result.push_back(nullptr);
  return result;
}

void make_pipe(int fds[2], const std::string& program) {
  if (pipe2(fds, O_CLOEXEC) != 0) {
    const int error = errno;
    throw LaunchError("cannot start '" + program + "': creating a pipe for its output failed (" +
                      std::strerror(error) +
                      "). The launcher may have run out of file descriptors; raise `ulimit -n` "
                      "or start fewer workers.");
  }
}

}  // namespace

ChildProcess::ChildProcess(const ChildSpec& spec, bool separate_stderr) {
  if (spec.argv.empty()) {
    throw InvalidArgumentError(
        "ChildProcess: argv is empty; give the program's path as argv[0], "
        "followed by its arguments.");
  }
  // Prepared before fork(): the child may only call async-signal-safe code.
  std::vector<std::string> argv = spec.argv;
  std::vector<std::string> env = child_environment(spec);
  std::vector<char*> argv_ptrs = pointers(argv);
  std::vector<char*> env_ptrs = pointers(env);
  const pid_t parent = getpid();

  int out[2], err[2] = {-1, -1};
  make_pipe(out, spec.argv[0]);
  if (separate_stderr) {
    try {
      make_pipe(err, spec.argv[0]);
    } catch (...) {
      close(out[0]);
      close(out[1]);
      throw;
    }
  }
  started_ = Clock::now();
  pid_ = fork();
  if (pid_ < 0) {
    const int error = errno;
    for (int fd : {out[0], out[1], err[0], err[1]}) {
      if (fd >= 0) close(fd);
    }
    throw LaunchError("cannot start '" + spec.argv[0] + "': fork failed (" + std::strerror(error) +
                      "). The machine may be out of memory or at its process limit "
                      "(`ulimit -u`); start fewer workers or free some.");
  }
  if (pid_ == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);  // The parent died before prctl.
    dup2(out[1], STDOUT_FILENO);
    dup2(separate_stderr ? err[1] : out[1], STDERR_FILENO);
    execve(argv_ptrs[0], argv_ptrs.data(), env_ptrs.data());
    const char* reason = std::strerror(errno);
    (void)!write(STDERR_FILENO, "exec failed: ", 13);
    (void)!write(STDERR_FILENO, reason, std::strlen(reason));
    (void)!write(STDERR_FILENO, "\n", 1);
    _exit(127);
  }
  setpgid(pid_, pid_);  // Also here, so the group exists before we signal it.
  close(out[1]);
  fds_[0] = out[0];
  if (separate_stderr) {
    close(err[1]);
    fds_[1] = err[0];
  }
}

ChildProcess::ChildProcess(ChildProcess&& other) noexcept
    : pid_(other.pid_),
      exited_(other.exited_),
      exit_code_(other.exit_code_),
      term_signal_(other.term_signal_),
      started_(other.started_),
      ended_(other.ended_) {
  fds_[0] = other.fds_[0];
  fds_[1] = other.fds_[1];
  other.fds_[0] = other.fds_[1] = -1;
  other.pid_ = -1;
  other.exited_ = true;
}

ChildProcess::~ChildProcess() {
  if (pid_ > 0 && !exited_) {
    signal_group(SIGKILL);
    reap_blocking();
  }
  for (int fd : fds_) {
    if (fd >= 0) close(fd);
  }
}

void ChildProcess::pump(const std::function<void(Stream, std::string_view)>& sink) {
  for (int i = 0; i < 2; ++i) {
    while (fds_[i] >= 0) {
      pollfd p{fds_[i], POLLIN, 0};
      if (poll(&p, 1, 0) <= 0) break;
      char buffer[16384];
      ssize_t n = read(fds_[i], buffer, sizeof(buffer));
      if (n > 0) {
        sink(i == 0 ? Stream::kStdout : Stream::kStderr, std::string_view(buffer, n));
      } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
        close(fds_[i]);
        fds_[i] = -1;
      }
    }
  }
}

std::vector<int> ChildProcess::open_pipes() const {
  std::vector<int> open;
  for (int fd : fds_) {
    if (fd >= 0) open.push_back(fd);
  }
  return open;
}

bool ChildProcess::reap() {
  if (exited_ || pid_ <= 0) return exited_;
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) != pid_) return false;
  exited_ = true;
  ended_ = Clock::now();
  if (WIFEXITED(status)) exit_code_ = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) term_signal_ = WTERMSIG(status);
  return true;
}

void ChildProcess::reap_blocking() {
  while (!reap()) std::this_thread::sleep_for(std::chrono::milliseconds(5));
}

bool ChildProcess::finished() const { return exited_ && fds_[0] < 0 && fds_[1] < 0; }

void ChildProcess::signal_group(int signal) const {
  if (pid_ > 0 && !exited_) kill(-pid_, signal);
}

double ChildProcess::seconds() const {
  return std::chrono::duration<double>((exited_ ? ended_ : Clock::now()) - started_).count();
}

std::string describe_exit(int exit_code, int term_signal) {
  if (term_signal != 0) {
    return base::detail::str("signal ", term_signal, " (", strsignal(term_signal), ")");
  }
  return base::detail::str("exit ", exit_code);
}

std::string ChildResult::status() const {
  return killed_at_deadline ? "killed at the deadline" : describe_exit(exit_code, term_signal);
}

void wait_for_output(const std::vector<ChildProcess*>& children,
                     std::chrono::milliseconds timeout) {
  std::vector<pollfd> fds;
  for (const auto* child : children) {
    for (int fd : child->open_pipes()) fds.push_back({fd, POLLIN, 0});
  }
  if (fds.empty()) {
    std::this_thread::sleep_for(timeout);
  } else {
    poll(fds.data(), fds.size(), static_cast<int>(timeout.count()));
  }
}

void stop_all(std::vector<ChildProcess*> children, std::chrono::milliseconds grace,
              const std::function<void(ChildProcess&)>& pump) {
  auto step = [&] {
    wait_for_output(children, std::chrono::milliseconds(20));
    bool all = true;
    for (auto* c : children) {
      pump(*c);
      all = c->reap() && all;
    }
    return all;
  };
  for (auto* c : children) {
    c->signal_group(SIGTERM);
    c->signal_group(SIGCONT);  // A stopped process acts on SIGTERM only once continued.
  }
  const auto kill_at = Clock::now() + grace;
  while (!step() && Clock::now() < kill_at) {
  }
  for (auto* c : children) c->signal_group(SIGKILL);
  while (!step()) {
  }
  // What the children wrote just before exiting may still be in the pipes
  // (a grandchild may even hold them open): read it for a bounded time.
  const auto give_up = Clock::now() + std::chrono::seconds(1);
  auto drained = [&] {
    for (auto* c : children) {
      if (!c->finished()) return false;
    }
    return true;
  };
  while (!drained() && Clock::now() < give_up) step();
}

std::vector<ChildResult> run_children(const std::vector<ChildSpec>& specs,
                                      std::chrono::milliseconds deadline,
                                      std::chrono::milliseconds grace) {
  std::vector<ChildProcess> children;
  children.reserve(specs.size());
  for (const auto& spec : specs) children.emplace_back(spec, /*separate_stderr=*/false);
  std::vector<ChildResult> results(children.size());
  std::vector<ChildProcess*> pointers;
  for (auto& c : children) pointers.push_back(&c);
  auto pump = [&](ChildProcess& child) {
    auto& output = results[&child - children.data()].output;
    child.pump([&](Stream, std::string_view chunk) { output.append(chunk); });
  };
  auto all_finished = [&] {
    for (auto& c : children) {
      if (!c.finished()) return false;
    }
    return true;
  };

  const auto stop_at = Clock::now() + deadline;
  while (!all_finished() && Clock::now() < stop_at) {
    wait_for_output(pointers, std::chrono::milliseconds(50));
    for (auto& c : children) {
      pump(c);
      c.reap();
    }
  }
  std::vector<ChildProcess*> running;
  for (size_t i = 0; i < children.size(); ++i) {
    if (!children[i].exited()) {
      results[i].killed_at_deadline = true;
      running.push_back(&children[i]);
    }
  }
  if (!running.empty()) stop_all(running, grace, pump);
  // Output still buffered in the pipes (a grandchild may keep them open):
  // read it for a bounded time, then give up on it.
  const auto give_up = Clock::now() + std::chrono::seconds(2);
  while (!all_finished() && Clock::now() < give_up) {
    wait_for_output(pointers, std::chrono::milliseconds(20));
    for (auto& c : children) pump(c);
  }
  for (size_t i = 0; i < children.size(); ++i) {
    results[i].pid = children[i].pid();
    results[i].exit_code = children[i].exit_code();
    results[i].term_signal = children[i].term_signal();
    results[i].seconds = children[i].seconds();
  }
  return results;
}

}  // namespace ddp::launch

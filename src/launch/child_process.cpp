#include "launch/child_process.hpp"

#include "ddp/environment.hpp"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <thread>

namespace ddp::launch {
namespace {

using Clock = std::chrono::steady_clock;

struct Running {
  ChildResult result;
  int output_fd = -1;
  bool exited = false;
  Clock::time_point started;
};

std::vector<std::string> childEnvironment(const ChildSpec& spec) {
  EnvironmentMap merged = captureEnvironment();
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

Running start(const ChildSpec& spec) {
  if (spec.argv.empty()) throw std::invalid_argument("runChildren: a child has an empty argv");
  // Prepared before fork(): the child may only call async-signal-safe code.
  std::vector<std::string> argv = spec.argv;
  std::vector<std::string> env = childEnvironment(spec);
  std::vector<char*> argv_ptrs = pointers(argv);
  std::vector<char*> env_ptrs = pointers(env);
  const pid_t parent = getpid();

  int pipe_fds[2];
  if (pipe2(pipe_fds, O_CLOEXEC) != 0) {
    throw std::runtime_error(std::string("runChildren: pipe failed: ") + std::strerror(errno));
  }
  Running running;
  running.started = Clock::now();
  pid_t pid = fork();
  if (pid < 0) {
    throw std::runtime_error(std::string("runChildren: fork failed: ") + std::strerror(errno));
  }
  if (pid == 0) {
    setpgid(0, 0);
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);  // The parent died before prctl.
    dup2(pipe_fds[1], STDOUT_FILENO);
    dup2(pipe_fds[1], STDERR_FILENO);
    execve(argv_ptrs[0], argv_ptrs.data(), env_ptrs.data());
    const char* reason = std::strerror(errno);
    (void)!write(STDERR_FILENO, "exec failed: ", 13);
    (void)!write(STDERR_FILENO, reason, std::strlen(reason));
    _exit(127);
  }
  setpgid(pid, pid);  // Also here, so the group exists before we signal it.
  close(pipe_fds[1]);
  running.result.pid = pid;
  running.output_fd = pipe_fds[0];
  return running;
}

void drain(Running& child, int timeout_ms) {
  if (child.output_fd < 0) return;
  pollfd p{child.output_fd, POLLIN, 0};
  if (poll(&p, 1, timeout_ms) <= 0) return;
  char buffer[8192];
  ssize_t n = read(child.output_fd, buffer, sizeof(buffer));
  if (n > 0) {
    child.result.output.append(buffer, static_cast<size_t>(n));
  } else if (n == 0 || (errno != EINTR && errno != EAGAIN)) {
    close(child.output_fd);
    child.output_fd = -1;
  }
}

void reap(Running& child, bool block) {
  if (child.exited) return;
  int status = 0;
  pid_t done = waitpid(child.result.pid, &status, block ? 0 : WNOHANG);
  if (done != child.result.pid) return;
  child.exited = true;
  child.result.seconds = std::chrono::duration<double>(Clock::now() - child.started).count();
  if (WIFEXITED(status)) child.result.exit_code = WEXITSTATUS(status);
  if (WIFSIGNALED(status)) child.result.term_signal = WTERMSIG(status);
}

bool allDone(const std::vector<Running>& children) {
  for (const auto& c : children) {
    if (!c.exited || c.output_fd >= 0) return false;
  }
  return true;
}

void pollAll(std::vector<Running>& children, int timeout_ms) {
  std::vector<pollfd> fds;
  for (auto& c : children) {
    if (c.output_fd >= 0) fds.push_back({c.output_fd, POLLIN, 0});
  }
  if (fds.empty()) {
    std::this_thread::sleep_for(std::chrono::milliseconds(timeout_ms));
  } else {
    poll(fds.data(), fds.size(), timeout_ms);
  }
  for (auto& c : children) {
    drain(c, 0);
    reap(c, false);
  }
}

}  // namespace

std::string ChildResult::status() const {
  if (killed_at_deadline) return "killed at the deadline";
  if (term_signal != 0) {
    return "signal " + std::to_string(term_signal) + " (" + strsignal(term_signal) + ")";
  }
  return "exit " + std::to_string(exit_code);
}

std::vector<ChildResult> runChildren(const std::vector<ChildSpec>& specs,
                                     std::chrono::milliseconds deadline,
                                     std::chrono::milliseconds grace) {
  std::vector<Running> children;
  try {
    for (const auto& spec : specs) children.push_back(start(spec));
  } catch (...) {
    for (auto& c : children) kill(-c.result.pid, SIGKILL), reap(c, true);
    throw;
  }
  const auto stop_at = Clock::now() + deadline;
  while (!allDone(children) && Clock::now() < stop_at) pollAll(children, 50);

  if (!allDone(children)) {
    for (auto& c : children) {
      if (c.exited) continue;
      c.result.killed_at_deadline = true;
      kill(-c.result.pid, SIGTERM);
    }
    const auto kill_at = Clock::now() + grace;
    while (!allDone(children) && Clock::now() < kill_at) pollAll(children, 50);
    for (auto& c : children) {
      if (!c.exited) kill(-c.result.pid, SIGKILL);
    }
    // A pipe may stay open in a grandchild; after SIGKILL to the group, read
    // what is left for a bounded time and then give up on it.
    const auto give_up = Clock::now() + std::chrono::seconds(2);
    while (!allDone(children) && Clock::now() < give_up) pollAll(children, 50);
  }
  std::vector<ChildResult> results;
  for (auto& c : children) {
    reap(c, true);
    if (c.output_fd >= 0) close(c.output_fd);
    results.push_back(std::move(c.result));
  }
  return results;
}

int findFreePort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) throw std::runtime_error("findFreePort: socket failed");
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  address.sin_port = 0;
  socklen_t length = sizeof(address);
  if (bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    close(fd);
    throw std::runtime_error(std::string("findFreePort: ") + std::strerror(errno));
  }
  close(fd);
  return ntohs(address.sin_port);
}

}  // namespace ddp::launch

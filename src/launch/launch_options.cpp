#include "launch/launch_options.hpp"

#include <ATen/Context.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <thread>

#include "ddp/environment.hpp"
#include "ddp/errors.hpp"
#include "store/job_secret.hpp"

namespace ddp::launch {
namespace {

int resolveNproc(const std::string& text) {
  if (text == "auto") {
    // torchrun's meaning: one worker per GPU, else one per CPU core.
    if (at::hasCUDA()) return static_cast<int>(at::getNumGPUs());
    return std::max(1u, std::thread::hardware_concurrency());
  }
  size_t used = 0;
  int value = 0;
  try {
    value = std::stoi(text, &used);
  } catch (...) {
    used = 0;
  }
  if (used != text.size() || text.empty()) {
    throw ConfigError("--nproc-per-node is '" + text +
                      "'; it must be a number of workers such as 2, or 'auto'.");
  }
  if (value < 1) {
    throw ConfigError("--nproc-per-node is " + text +
                      "; it must be at least 1 (or 'auto' for one per GPU or core).");
  }
  return value;
}

std::string findProgram(const std::string& name) {
  namespace fs = std::filesystem;
  auto executable = [](const fs::path& p) {
    return fs::is_regular_file(p) && access(p.c_str(), X_OK) == 0;
  };
  if (name.find('/') != std::string::npos) {
    if (executable(name)) return fs::absolute(name).string();
  } else {
    const EnvironmentMap env = capture_environment();
    std::string path = env.count("PATH") ? env.at("PATH") : "/usr/bin:/bin";
    size_t start = 0;
    while (start <= path.size()) {
      size_t end = path.find(':', start);
      if (end == std::string::npos) end = path.size();
      fs::path candidate = fs::path(path.substr(start, end - start)) / name;
      if (executable(candidate)) return candidate.string();
      start = end + 1;
    }
  }
  throw ConfigError(
      "the program '" + name + "' does not exist or is not executable" +
      (name.find('/') == std::string::npos ? " (searched PATH)" : "") +
      "; give the path of the training binary, e.g. ./build/bin/example_toy_trainer.");
}

// Node 0 hosts the rendezvous at master_addr:master_port; find out now,
// before starting anything, whether that port can be had.
void checkPortFree(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* result = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &result) != 0 || !result) {
    throw ConfigError("--master-addr '" + host +
                      "' cannot be resolved; give a host name or "
                      "address of this machine (node 0), e.g. 127.0.0.1.");
  }
  int fd = socket(result->ai_family, SOCK_STREAM, 0);
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  const bool ok = bind(fd, result->ai_addr, result->ai_addrlen) == 0;
  const int error = errno;
  close(fd);
  freeaddrinfo(result);
  if (!ok) {
    throw RendezvousError("cannot use " + host + ":" + std::to_string(port) + " for the job: " +
                          (error == EADDRINUSE ? std::string("the port is already in use")
                                               : std::string(std::strerror(error))) +
                          ". Choose another --master-port, or use --standalone to pick a free "
                          "one.");
  }
}

}  // namespace

LaunchPlan resolveLaunch(const LaunchOptions& options) {
  LaunchPlan plan;
  plan.options = options;
  if (options.command.empty()) {
    throw ConfigError("no program given; usage: ddprun [options] PROGRAM [ARGS...]");
  }
  plan.nproc = resolveNproc(options.nproc_per_node);
  if (options.nnodes < 1) {
    throw ConfigError("--nnodes is " + std::to_string(options.nnodes) + "; it must be at least 1.");
  }
  if (options.node_rank < 0 || options.node_rank >= options.nnodes) {
    throw ConfigError("--node-rank is " + std::to_string(options.node_rank) +
                      ", but nodes are numbered 0 to " + std::to_string(options.nnodes - 1) +
                      " for --nnodes " + std::to_string(options.nnodes) + ".");
  }
  if (options.standalone && options.nnodes != 1) {
    throw ConfigError("--standalone runs one node, but --nnodes is " +
                      std::to_string(options.nnodes) + "; drop one of them.");
  }
  if (options.max_restarts < 0) {
    throw ConfigError("--max-restarts is " + std::to_string(options.max_restarts) +
                      "; it must be 0 or more.");
  }
  auto duration = [](double seconds, const char* name) {
    if (!(seconds > 0)) {
      throw ConfigError(std::string(name) + " is " + std::to_string(seconds) +
                        "; it must be a positive number of seconds.");
    }
    return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
  };
  plan.monitor_interval = duration(options.monitor_interval_s, "--monitor-interval");
  plan.stop_grace = duration(options.stop_grace_s, "--stop-grace");
  plan.rendezvous_timeout = duration(options.rendezvous_timeout_s, "--rendezvous-timeout");
  if (options.standalone) {
    plan.options.master_addr = "127.0.0.1";
    plan.options.master_port = 0;  // chosen when the job starts
  } else if (options.master_port < 1 || options.master_port > 65535) {
    throw ConfigError("--master-port is " + std::to_string(options.master_port) +
                      "; a TCP port must be between 1 and 65535.");
  }
  plan.program_path = findProgram(options.command.front());
  if (!options.secret_file.empty()) {
    store::read_job_secret(options.secret_file);  // fail now, not in every worker
    plan.secret_file = std::filesystem::absolute(options.secret_file).string();
  }
  if (!options.standalone && options.node_rank == 0) {
    checkPortFree(options.master_addr, options.master_port);
  }
  return plan;
}

std::map<std::string, std::string> workerEnvironment(const LaunchPlan& plan,
                                                     const WorkerPlacement& p) {
  const auto& o = plan.options;
  std::map<std::string, std::string> env = {
      {"RANK", std::to_string(p.rank)},
      {"LOCAL_RANK", std::to_string(p.local_rank)},
      {"GROUP_RANK", std::to_string(o.node_rank)},
      {"ROLE_RANK", std::to_string(p.rank)},
      {"ROLE_NAME", "default"},
      {"LOCAL_WORLD_SIZE", std::to_string(plan.nproc)},
      {"WORLD_SIZE", std::to_string(p.world_size)},
      {"ROLE_WORLD_SIZE", std::to_string(p.world_size)},
      {"GROUP_WORLD_SIZE", std::to_string(o.nnodes)},
      {"MASTER_ADDR", p.master_addr},
      {"MASTER_PORT", std::to_string(p.master_port)},
      {"TORCHELASTIC_RESTART_COUNT", std::to_string(p.restart_count)},
      {"TORCHELASTIC_MAX_RESTARTS", std::to_string(o.max_restarts)},
      {"TORCHELASTIC_RUN_ID", o.run_id},
      {"TORCHELASTIC_USE_AGENT_STORE", "False"},
      {"TORCHELASTIC_ERROR_FILE", p.error_file},
  };
  if (!plan.secret_file.empty()) env[store::kJobSecretFileVariable] = plan.secret_file;
  // As torchrun: share the cores among the workers unless the user chose.
  const EnvironmentMap inherited = capture_environment();
  if (!inherited.count("OMP_NUM_THREADS")) {
    const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
    env["OMP_NUM_THREADS"] = std::to_string(std::max(1, cores / plan.nproc));
  }
  return env;
}

}  // namespace ddp::launch

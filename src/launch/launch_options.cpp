#include "launch/launch_options.hpp"

#include <ATen/Context.h>
#include <netdb.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>
#include <tuple>

#include "base/str.hpp"
#include "comm/store/job_secret.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/environment.hpp"
#include "launch/to_int.hpp"

namespace ddp::launch {
namespace {

int resolve_nproc(const std::string& text) {
  // torchrun's meanings: one worker per GPU ("gpu", and "auto" when there
  // are GPUs) or per CPU core ("cpu", and "auto" without GPUs).
  if (text == "gpu") {
    if (!at::hasCUDA() || at::getNumGPUs() == 0) {
      throw ConfigError(
          "--nproc-per-node is 'gpu', but LibTorch sees no CUDA GPU on this node; give a number "
          "of workers, or 'cpu' for one per core.");
    }
    return static_cast<int>(at::getNumGPUs());
  }
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  if (text == "cpu") return cores;
  if (text == "auto") return at::hasCUDA() ? static_cast<int>(at::getNumGPUs()) : cores;
  const std::optional<int> value = to_int(text);
  if (!value) {
    throw ConfigError("--nproc-per-node is '" + text +
                      "'; it must be a number of workers such as 2, or 'gpu', 'cpu' or 'auto'.");
  }
  if (*value < 1) {
    throw ConfigError("--nproc-per-node is " + text +
                      "; it must be at least 1 (or 'auto' for one per GPU or core).");
  }
  return *value;
}

// torchrun's --nnodes: N, or MIN:MAX.
std::pair<int, int> parse_nnodes(const std::string& text) {
  const size_t colon = text.find(':');
  const std::optional<int> low = to_int(text.substr(0, colon));
  const std::optional<int> high = colon == std::string::npos ? low : to_int(text.substr(colon + 1));
  if (!low || !high) {
    throw ConfigError("--nnodes is '" + text +
                      "'; it must be a number of nodes such as 2, or a range MIN:MAX such as 1:4.");
  }
  if (*low < 1 || *high < *low) {
    throw ConfigError("--nnodes is '" + text +
                      "'; a job needs at least 1 node, and MIN must not exceed MAX.");
  }
  return {*low, *high};
}

double to_seconds(const std::string& text, const std::string& name) {
  size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (...) {
    used = 0;
  }
  if (used != text.size() || text.empty() || !(value > 0)) {
    throw ConfigError(name + " is '" + text + "'; it must be a positive number of seconds.");
  }
  return value;
}

std::chrono::milliseconds duration(double seconds, const std::string& name) {
  if (!(seconds > 0)) {
    throw ConfigError(
        base::detail::str(name, " is ", seconds, "; it must be a positive number of seconds."));
  }
  return std::chrono::milliseconds(static_cast<int64_t>(seconds * 1000));
}

// torchrun's --rdzv-conf: KEY=VALUE pairs separated by commas.
void apply_rdzv_conf(const std::string& conf, LaunchPlan& plan) {
  size_t start = 0;
  while (start < conf.size()) {
    size_t end = conf.find(',', start);
    if (end == std::string::npos) end = conf.size();
    const std::string item = conf.substr(start, end - start);
    start = end + 1;
    if (item.empty()) continue;
    const size_t equals = item.find('=');
    if (equals == std::string::npos) {
      throw ConfigError("--rdzv-conf has '" + item +
                        "', which is not KEY=VALUE; write pairs separated by commas, e.g. "
                        "join_timeout=900,last_call_timeout=30.");
    }
    const std::string key = item.substr(0, equals);
    const std::string value = item.substr(equals + 1);
    const std::string name = "--rdzv-conf " + key;
    if (key == "join_timeout" || key == "timeout") {
      plan.rendezvous_timeout = duration(to_seconds(value, name), name);
    } else if (key == "last_call_timeout") {
      plan.last_call_timeout = duration(to_seconds(value, name), name);
    } else if (key == "node_timeout") {
      plan.node_timeout = duration(to_seconds(value, name), name);
    } else if (key == "takeover_timeout") {
      plan.takeover_timeout = duration(to_seconds(value, name), name);
    } else if (key == "is_host") {
      std::string lower = value;
      for (char& c : lower) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
      if (lower == "1" || lower == "true" || lower == "yes" || lower == "y" || lower == "t") {
        plan.is_host = true;
      } else if (lower == "0" || lower == "false" || lower == "no" || lower == "n" ||
                 lower == "f") {
        plan.is_host = false;
      } else {
        throw ConfigError(name + " is '" + value + "'; it must be true or false.");
      }
    } else {
      throw ConfigError("--rdzv-conf has the key '" + key +
                        "', which ddprun does not use; it takes join_timeout, "
                        "last_call_timeout, node_timeout and takeover_timeout (seconds) and "
                        "is_host (true or false).");
    }
  }
}

// HOST[:PORT] or [IPv6]:PORT.
std::pair<std::string, int> parse_endpoint(const std::string& text, int default_port) {
  std::string host = text;
  std::string port;
  if (!text.empty() && text.front() == '[') {
    const size_t close = text.find(']');
    host = text.substr(1, close == std::string::npos ? std::string::npos : close - 1);
    if (close != std::string::npos && close + 1 < text.size() && text[close + 1] == ':') {
      port = text.substr(close + 2);
    }
  } else if (std::count(text.begin(), text.end(), ':') == 1) {
    host = text.substr(0, text.find(':'));
    port = text.substr(text.find(':') + 1);
  }
  const std::optional<int> number = port.empty() ? default_port : to_int(port);
  if (host.empty() || !number || *number < 1 || *number > 65535) {
    throw ConfigError("--rdzv-endpoint is '" + text +
                      "'; it must be HOST[:PORT] with a port between 1 and 65535, e.g. "
                      "node0:29400.");
  }
  return {host, *number};
}

bool is_executable_file(const std::filesystem::path& p) {
  return std::filesystem::is_regular_file(p) && access(p.c_str(), X_OK) == 0;
}

// `name` itself where it has a slash, else the first executable `name` in PATH.
std::optional<std::string> search_path(const std::string& name) {
  namespace fs = std::filesystem;
  if (name.find('/') != std::string::npos) {
    if (is_executable_file(name)) return fs::absolute(name).string();
    return std::nullopt;
  }
  const EnvironmentMap env = capture_environment();
  std::string path = env.count("PATH") ? env.at("PATH") : "/usr/bin:/bin";
  size_t start = 0;
  while (start <= path.size()) {
    size_t end = path.find(':', start);
    if (end == std::string::npos) end = path.size();
    fs::path candidate = fs::path(path.substr(start, end - start)) / name;
    if (is_executable_file(candidate)) return candidate.string();
    start = end + 1;
  }
  return std::nullopt;
}

bool ends_with(const std::string& text, const std::string& tail) {
  return text.size() >= tail.size() &&
         text.compare(text.size() - tail.size(), tail.size(), tail) == 0;
}

// Note [Python scripts]
// As torchrun, ddprun runs a Python script with the interpreter: without
// --no-python, a program whose name ends in .py, or a file that exists but
// is not executable, runs as `python3 -u SCRIPT ARGS...` (-u: unbuffered, so
// the ranks' lines come out as they are printed). torchrun uses the Python
// that runs it (sys.executable); ddprun has none, so it takes the first
// python3 in its PATH, the one a shell would run (a virtual environment's,
// where one is active). Any other program runs itself, found through PATH
// as a shell would find it; --no-python runs even a .py file itself.
std::vector<std::string> resolve_command(const LaunchOptions& options) {
  namespace fs = std::filesystem;
  std::vector<std::string> argv = options.command;
  const std::string& name = argv.front();
  const bool script =
      !options.no_python &&
      (ends_with(name, ".py") || (fs::is_regular_file(name) && access(name.c_str(), X_OK) != 0));
  if (script) {
    if (!fs::is_regular_file(name)) {
      throw ConfigError("the Python script '" + name +
                        "' does not exist; give its path (relative to the current directory), "
                        "or --no-python for a program that is not a Python script.");
    }
    const std::optional<std::string> python = search_path("python3");
    if (!python) {
      throw ConfigError("'" + name +
                        "' is a Python script, run as `python3 -u SCRIPT`, but there is no "
                        "python3 in PATH; put one there (e.g. activate the virtual environment), "
                        "or give --no-python to run the program itself.");
    }
    argv.front() = fs::absolute(name).string();
    argv.insert(argv.begin(), {*python, "-u"});
    return argv;
  }
  const std::optional<std::string> program = search_path(name);
  if (!program) {
    throw ConfigError(
        "the program '" + name + "' does not exist or is not executable" +
        (name.find('/') == std::string::npos ? " (searched PATH)" : "") +
        "; give the path of the training binary, e.g. ./build/bin/example_toy_trainer, or a "
        "Python script.");
  }
  argv.front() = *program;
  return argv;
}

// Node 0 hosts the rendezvous at master_addr:master_port; find out now,
// before starting anything, whether that port can be had.
void check_port_free(const std::string& host, int port) {
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
    throw RendezvousError(base::detail::str(
        "cannot use ", host, ":", port, " for the job: ",
        error == EADDRINUSE ? std::string("the port is already in use")
                            : std::string(std::strerror(error)),
        ". Choose another --master-port, or use --standalone to pick a free one."));
  }
}

}  // namespace

LaunchPlan resolve_launch(const LaunchOptions& options) {
  LaunchPlan plan;
  plan.options = options;
  if (options.command.empty()) {
    throw ConfigError("no program given; usage: ddprun [options] PROGRAM [ARGS...]");
  }
  const bool gpu_workers =
      options.nproc_per_node == "gpu" || (options.nproc_per_node == "auto" && at::hasCUDA());
  if (options.spares > 0 && gpu_workers) {
    throw ConfigError(base::detail::str(
        "--spares ", options.spares, " with --nproc-per-node ", options.nproc_per_node,
        " (one worker per GPU): hot spares are CPU-only, since "
        "a spare loads the program before it has a LOCAL_RANK to pick its GPU by. Drop --spares "
        "for GPU workers."));
  }
  plan.nproc = resolve_nproc(options.nproc_per_node);
  std::tie(plan.min_nodes, plan.max_nodes) = parse_nnodes(options.nnodes);
  if (options.rdzv_backend == "c10d") {
    plan.c10d = true;
  } else if (options.rdzv_backend == "etcd" || options.rdzv_backend == "etcd-v2") {
    throw ConfigError("--rdzv-backend is '" + options.rdzv_backend +
                      "': ddprun has no etcd client. Use c10d (the nodes meet at "
                      "--rdzv-endpoint, one of them hosting the store) or static.");
  } else if (options.rdzv_backend != "static") {
    throw ConfigError("--rdzv-backend is '" + options.rdzv_backend +
                      "'; it must be static (node ranks given) or c10d (nodes meet at "
                      "--rdzv-endpoint).");
  }
  if (options.standalone && plan.max_nodes != 1) {
    throw ConfigError("--standalone runs one node, but --nnodes is " + options.nnodes +
                      "; drop one of them.");
  }
  if (!plan.c10d && plan.min_nodes != plan.max_nodes) {
    throw ConfigError("--nnodes is " + options.nnodes +
                      ", a range, but the static rendezvous needs a fixed number of nodes; add "
                      "--rdzv-backend c10d --rdzv-endpoint HOST:PORT.");
  }
  if (!plan.c10d && (options.node_rank < 0 || options.node_rank >= plan.max_nodes)) {
    throw ConfigError(base::detail::str("--node-rank is ", options.node_rank,
                                        ", but nodes are numbered 0 to ", plan.max_nodes - 1,
                                        " for --nnodes ", options.nnodes, "."));
  }
  if (options.max_restarts < 0) {
    throw ConfigError(
        base::detail::str("--max-restarts is ", options.max_restarts, "; it must be 0 or more."));
  }
  if (options.recovery != "disk" && options.recovery != "memory") {
    throw ConfigError("--recovery is '" + options.recovery +
                      "'; it must be 'disk' (restart every worker; the program resumes from its "
                      "snapshot) or 'memory' (restart the failed worker alone; the program uses "
                      "ddp::elastic::run).");
  }
  plan.memory_recovery = options.recovery == "memory";
  if (options.spares < 0) {
    throw ConfigError(base::detail::str("--spares is ", options.spares,
                                        "; it must be 0 or more hot spares per node."));
  }
  if (options.spares > 0 && !plan.memory_recovery) {
    throw ConfigError(base::detail::str(
        "--spares ", options.spares,
        " needs --recovery memory: a spare takes a lost worker's "
        "rank inside ddp::elastic::run, while --recovery ",
        options.recovery, " restarts every worker. Add --recovery memory, or drop --spares."));
  }
  plan.spares = options.spares;
  plan.monitor_interval = duration(options.monitor_interval_s, "--monitor-interval");
  plan.stop_grace = duration(options.stop_grace_s, "--stop-grace");
  plan.rendezvous_timeout = duration(options.rendezvous_timeout_s, "--rendezvous-timeout");
  apply_rdzv_conf(options.rdzv_conf, plan);
  if (plan.node_timeout.count() == 0) {
    plan.node_timeout = std::max(std::chrono::milliseconds(5000), 10 * plan.monitor_interval);
  }
  if (plan.takeover_timeout.count() == 0) {
    plan.takeover_timeout = std::max(std::chrono::milliseconds(2000), 20 * plan.monitor_interval);
  }
  plan.redirects = StreamChoice::parse(options.redirects, "--redirects");
  plan.tee = StreamChoice::parse(options.tee, "--tee");
  if (options.standalone) {
    plan.options.master_addr = "127.0.0.1";
    plan.options.master_port = 0;  // chosen when the job starts
  } else if (!options.rdzv_endpoint.empty()) {
    // torchrun's endpoint: where the agents meet, for either backend.
    std::tie(plan.store_host, plan.store_port) = parse_endpoint(options.rdzv_endpoint, 29400);
    if (!plan.c10d) plan.options.master_addr = plan.store_host;
  } else if (plan.c10d && plan.max_nodes > 1) {
    throw ConfigError(
        "--rdzv-backend c10d needs --rdzv-endpoint HOST[:PORT]: the address where the nodes "
        "meet (the first node that can bind it hosts the rendezvous there).");
  } else if (options.master_port < 1 || options.master_port > 65535) {
    throw ConfigError(base::detail::str("--master-port is ", options.master_port,
                                        "; a TCP port must be between 1 and 65535."));
  } else {
    plan.store_host = options.master_addr;
    plan.store_port = options.master_port;
  }
  plan.argv = resolve_command(options);
  const EnvironmentMap env = capture_environment();
  plan.allocator = resolve_allocator(options.allocator, env, library_search_dirs(env));
  if (!options.secret_file.empty()) {
    store::read_job_secret(options.secret_file);  // fail now, not in every worker
    plan.secret_file = std::filesystem::absolute(options.secret_file).string();
  }
  if (!options.standalone && !plan.c10d && options.node_rank == 0) {
    check_port_free(plan.store_host, plan.store_port);
  }
  return plan;
}

}  // namespace ddp::launch

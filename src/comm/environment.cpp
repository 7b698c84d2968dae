#include "ddp/comm/environment.hpp"

#include <charconv>
#include <cstdlib>
#include <sstream>
#include <vector>

#include "base/str.hpp"
#include "ddp/base/errors.hpp"

extern char** environ;  // NOLINT: POSIX; read only in capture_environment().

namespace ddp::comm {
namespace {

/// A value together with where it came from, for error messages.
struct Sourced {
  int value = 0;
  std::string origin;  // e.g. "RANK (torchrun)" or "the rank override"
};

struct PartialTopology {
  LaunchSource source = LaunchSource::kNone;
  std::optional<Sourced> rank, world_size, local_rank, local_world_size, group_rank;
  std::optional<std::string> master_addr;
  std::optional<Sourced> master_port;
  bool agent_store = false;
  std::optional<Sourced> restart_count;
};

std::optional<std::string> lookup(const EnvironmentMap& env, const std::string& name) {
  auto it = env.find(name);
  if (it == env.end()) return std::nullopt;
  return it->second;
}

int parse_integer(const std::string& text, const std::string& origin) {
  int value = 0;
  const char* begin = text.data();
  const char* end = begin + text.size();
  auto [ptr, ec] = std::from_chars(begin, end, value);
  if (text.empty() || ec != std::errc() || ptr != end) {
    throw ConfigError(origin + " is '" + text +
                      "', which is not a whole number. It must be an integer such as 0 "
                      "or 4: check the launcher command or script that set it.");
  }
  return value;
}

std::optional<Sourced> integer_variable(const EnvironmentMap& env, const std::string& name,
                                        LaunchSource source) {
  auto text = lookup(env, name);
  if (!text) return std::nullopt;
  std::string origin = name + " (" + to_string(source) + ")";
  return Sourced{parse_integer(*text, origin), origin};
}

Sourced required_variable(const EnvironmentMap& env, const std::string& name,
                          const std::string& present, LaunchSource source) {
  auto value = integer_variable(env, name, source);
  if (!value) {
    throw ConfigError(present + " is set but " + name + " is missing (" + to_string(source) +
                      "'s variables come together). Set " + name +
                      ", or unset the partial variables and start the program with a launcher "
                      "(ddprun, torchrun, mpirun or srun).");
  }
  return *value;
}

// The names one launcher gives the same facts.
struct LauncherVariables {
  LaunchSource source;
  const char* rank;
  const char* world_size;
  const char* local_rank;
  const char* local_world_size;
  const char* group_rank;  // nullptr: this launcher does not say
};

constexpr LauncherVariables kTorchrun{
    LaunchSource::kTorchrun, "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK"};
constexpr LauncherVariables kOpenMpi{LaunchSource::kOpenMpi,       "OMPI_COMM_WORLD_RANK",
                                     "OMPI_COMM_WORLD_SIZE",       "OMPI_COMM_WORLD_LOCAL_RANK",
                                     "OMPI_COMM_WORLD_LOCAL_SIZE", nullptr};
constexpr LauncherVariables kSlurm{LaunchSource::kSlurm, "SLURM_PROCID",          "SLURM_NTASKS",
                                   "SLURM_LOCALID",      "SLURM_NTASKS_PER_NODE", "SLURM_NODEID"};

bool describes(const EnvironmentMap& env, const LauncherVariables& names) {
  return env.count(names.rank) || env.count(names.world_size);
}

PartialTopology from_launcher(const EnvironmentMap& env, const LauncherVariables& names) {
  PartialTopology t;
  t.source = names.source;
  const char* present = env.count(names.rank) ? names.rank : names.world_size;
  t.rank = required_variable(env, names.rank, present, names.source);
  t.world_size = required_variable(env, names.world_size, present, names.source);
  t.local_rank = integer_variable(env, names.local_rank, names.source);
  t.local_world_size = integer_variable(env, names.local_world_size, names.source);
  if (names.group_rank) t.group_rank = integer_variable(env, names.group_rank, names.source);
  t.master_addr = lookup(env, "MASTER_ADDR");
  t.master_port = integer_variable(env, "MASTER_PORT", names.source);
  return t;
}

// torchrun's (and ddprun's) variables about the job rather than the rank.
void add_torchrun_extras(const EnvironmentMap& env, PartialTopology& t) {
  t.restart_count = integer_variable(env, kRestartCountVariable, LaunchSource::kTorchrun);
  const auto agent_store = lookup(env, kAgentStoreVariable);
  if (!agent_store || *agent_store == "False") return;
  if (*agent_store != "True") {
    throw ConfigError(std::string(kAgentStoreVariable) + " (torchrun) is '" + *agent_store +
                      "'; torchrun sets it to True (its agent hosts the rendezvous store) or "
                      "False. Unset it, or leave it to the launcher.");
  }
  t.agent_store = true;
}

// Slurm writes node lists compressed: "node[01-04,07],gpu5". Rank 0 runs on
// the first node, which is what the rendezvous needs.
std::string first_slurm_host(const std::string& nodelist) {
  std::string first;
  int depth = 0;
  for (char c : nodelist) {
    if (c == ',' && depth == 0) break;
    depth += (c == '[') - (c == ']');
    first += c;
  }
  auto open = first.find('[');
  if (open == std::string::npos) return first;
  auto close = first.find(']', open);
  std::string range = first.substr(open + 1, close - open - 1);
  std::string start = range.substr(0, range.find_first_of(",-"));
  return first.substr(0, open) + start +
         (close == std::string::npos ? "" : first.substr(close + 1));
}

// SLURM_TASKS_PER_NODE looks like "2(x3),1": three nodes with 2 tasks, then
// one node with 1. Returns the count for node `node_id`.
std::optional<int> slurm_tasks_on_node(const std::string& spec, int node_id) {
  std::stringstream items(spec);
  std::string item;
  int node = 0;
  while (std::getline(items, item, ',')) {
    int tasks = parse_integer(item.substr(0, item.find('(')), "SLURM_TASKS_PER_NODE (Slurm)");
    int repeat = 1;
    if (auto x = item.find("(x"); x != std::string::npos) {
      repeat =
          parse_integer(item.substr(x + 2, item.find(')') - x - 2), "SLURM_TASKS_PER_NODE (Slurm)");
    }
    if (node_id < node + repeat) return tasks;
    node += repeat;
  }
  return std::nullopt;
}

// Slurm also describes nodes of unequal size and names the master's host.
void add_slurm_extras(const EnvironmentMap& env, PartialTopology& t) {
  if (!t.local_world_size) {
    auto spec = lookup(env, "SLURM_TASKS_PER_NODE");
    if (spec) {
      if (auto tasks = slurm_tasks_on_node(*spec, t.group_rank ? t.group_rank->value : 0)) {
        t.local_world_size = Sourced{*tasks, "SLURM_TASKS_PER_NODE (Slurm)"};
      }
    }
  }
  if (!t.master_addr) {
    auto nodelist = lookup(env, "SLURM_STEP_NODELIST");
    if (!nodelist) nodelist = lookup(env, "SLURM_JOB_NODELIST");
    if (nodelist) t.master_addr = first_slurm_host(*nodelist);
  }
}

PartialTopology from_environment(const EnvironmentMap& env) {
  if (describes(env, kTorchrun)) {
    PartialTopology t = from_launcher(env, kTorchrun);
    add_torchrun_extras(env, t);
    return t;
  }
  if (describes(env, kOpenMpi)) return from_launcher(env, kOpenMpi);
  if (describes(env, kSlurm)) {
    PartialTopology t = from_launcher(env, kSlurm);
    add_slurm_extras(env, t);
    return t;
  }
  return PartialTopology{};
}

void apply_overrides(PartialTopology& t, const TopologyOverrides& o) {
  auto apply = [](std::optional<Sourced>& field, const std::optional<int>& value,
                  const char* name) {
    if (value) field = Sourced{*value, std::string("the explicit ") + name + " option"};
  };
  if (o.rank || o.world_size) t.source = LaunchSource::kExplicit;
  // The agent's store is at the launcher's address only: an override that
  // moves the rendezvous elsewhere means a store ddp hosts there.
  if ((o.master_addr && o.master_addr != t.master_addr) ||
      (o.master_port && (!t.master_port || *o.master_port != t.master_port->value))) {
    t.agent_store = false;
  }
  apply(t.rank, o.rank, "rank");
  apply(t.world_size, o.world_size, "world_size");
  apply(t.local_rank, o.local_rank, "local_rank");
  apply(t.local_world_size, o.local_world_size, "local_world_size");
  apply(t.master_port, o.master_port, "master_port");
  if (o.master_addr) t.master_addr = o.master_addr;
  if (t.rank.has_value() != t.world_size.has_value()) {
    throw ConfigError(std::string("an explicit ") + (t.rank ? "rank" : "world_size") +
                      " was given without " + (t.rank ? "world_size" : "rank") +
                      " and the environment has none: give both options, or start the "
                      "program with a launcher.");
  }
}

void check_range(const Sourced& value, int low, int high_exclusive, const std::string& rule,
                 const std::string& fix) {
  if (value.value < low || value.value >= high_exclusive) {
    throw ConfigError(
        base::detail::str(value.origin, " is ", value.value, ", but ", rule, ". ", fix));
  }
}

}  // namespace

const char* to_string(LaunchSource source) noexcept {
  switch (source) {
    case LaunchSource::kNone:
      return "no launcher";
    case LaunchSource::kTorchrun:
      return "torchrun";
    case LaunchSource::kOpenMpi:
      return "Open MPI";
    case LaunchSource::kSlurm:
      return "Slurm";
    case LaunchSource::kExplicit:
      return "explicit options";
  }
  return "unknown";
}

EnvironmentMap capture_environment() {
  EnvironmentMap env;
  for (char** entry = environ; entry && *entry; ++entry) {
    std::string text(*entry);
    auto eq = text.find('=');
    if (eq != std::string::npos) env.emplace(text.substr(0, eq), text.substr(eq + 1));
  }
  return env;
}

Topology resolve_topology(const EnvironmentMap& env, const TopologyOverrides& overrides) {
  PartialTopology p = from_environment(env);
  apply_overrides(p, overrides);

  Topology t;
  t.source = p.source;
  if (!p.rank) return t;  // No launcher and no overrides: a single process.

  const Sourced& world = *p.world_size;
  check_range(world, 1, 1 << 24, "the world size must be at least 1",
              "Check the launcher's process count.");
  check_range(*p.rank, 0, world.value,
              base::detail::str("ranks run from 0 to ", world.value - 1, " (", world.origin, " is ",
                                world.value, ")"),
              "Each process needs a distinct rank below the world size: check the launcher "
              "command or the values you exported.");
  t.rank = p.rank->value;
  t.world_size = world.value;

  // Without node-local information, assume every rank runs on this node.
  Sourced local_world = p.local_world_size.value_or(Sourced{world.value, "the world size"});
  check_range(local_world, 1, world.value + 1,
              base::detail::str("the local world size must be between 1 and the world size (",
                                world.value, ")"),
              "Check the launcher's per-node process count.");
  Sourced local_rank = p.local_rank.value_or(Sourced{t.rank % local_world.value, "the rank"});
  check_range(local_rank, 0, local_world.value,
              base::detail::str("local ranks run from 0 to ", local_world.value - 1),
              "Check the launcher's per-node process count.");
  t.local_rank = local_rank.value;
  t.local_world_size = local_world.value;
  t.group_rank = p.group_rank ? p.group_rank->value : t.rank / local_world.value;

  if (p.master_addr) {
    if (p.master_addr->empty()) {
      throw ConfigError(
          "MASTER_ADDR is empty: set it to the host name or IP address of the "
          "node that runs rank 0, e.g. MASTER_ADDR=127.0.0.1 on one machine.");
    }
    t.master_addr = *p.master_addr;
  } else if (t.world_size > 1) {
    throw ConfigError(base::detail::str(
        "MASTER_ADDR is not set, but ", to_string(p.source), " describes ", t.world_size,
        " processes that must meet at rank 0. Export MASTER_ADDR (the host of rank 0) and "
        "MASTER_PORT (a free port), e.g. `mpirun -x MASTER_ADDR=node0 -x MASTER_PORT=29500 ...`, "
        "or use ddprun/torchrun, which set them."));
  }
  if (p.master_port) {
    check_range(*p.master_port, 1, 65536, "a TCP port must be between 1 and 65535",
                "Choose a free port, e.g. MASTER_PORT=29500.");
    t.master_port = p.master_port->value;
  }
  if (p.restart_count) {
    check_range(*p.restart_count, 0, 1 << 30, "a restart count is 0 or more",
                "Leave TORCHELASTIC_RESTART_COUNT to the launcher.");
    t.restart_count = p.restart_count->value;
  }
  t.agent_store = p.agent_store;
  return t;
}

}  // namespace ddp::comm

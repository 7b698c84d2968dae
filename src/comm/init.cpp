#include "ddp/comm/init.hpp"

#include <torch/csrc/distributed/c10d/HashStore.hpp>
#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <signal.h>

#include <exception>
#include <iostream>
#include <utility>

#include "base/str.hpp"
#include "comm/backends/backends.hpp"
#include "comm/flight_recorder/flight_recorder_observer.hpp"
#include "comm/store/job_secret.hpp"
#include "comm/store/socket.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/error_file.hpp"
#include "ddp/comm/flight_recorder.hpp"
#include "ddp/comm/observer_factory.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/comm/tcp_store.hpp"

namespace ddp::comm {
namespace {

void validate(const InitOptions& options) {
  const std::string& backend = options.backend();
  if (backend != "auto" && backend != "gloo" && backend != "nccl" && backend != "shm") {
    throw ConfigError("unknown backend '" + backend +
                      "': ddp offers 'auto', 'gloo', 'shm' and 'nccl'. Use 'auto' to pick per "
                      "tensor and node layout, 'shm' or 'gloo' for CPU training, 'nccl' for "
                      "GPUs.");
  }
  auto positive = [](std::chrono::milliseconds value, const char* name) {
    if (value.count() <= 0) {
      throw ConfigError(base::detail::str(
          name, " is ", value.count(), " ms; it must be positive, e.g. std::chrono::seconds(60)."));
    }
  };
  positive(options.rendezvous_timeout(), "rendezvous_timeout");
  positive(options.collective_timeout(), "collective_timeout");
}

std::string rank_key(int rank) { return base::detail::str("ddp/joined/", rank); }

// The ranks below world_size without their key in `store` (at most 16
// named), and how many there are.
std::pair<std::string, int> missing_ranks(c10d::Store& store, const Topology& topology) {
  std::string missing;
  int count = 0;
  for (int r = 0; r < topology.world_size; ++r) {
    if (store.check({rank_key(r)})) continue;
    if (count++ < 16) missing += base::detail::str(missing.empty() ? "" : ", ", r);
  }
  return {missing, count};
}

// Note [Joining before the backend starts]
// Gloo's own rendezvous would also time out when a rank is missing, but its
// message names a store key, not a rank. ddp first has every rank announce
// itself with its world size, so a missing rank or a rank started with
// another WORLD_SIZE is reported as such.
void join_all_ranks(c10d::Store& store, const Topology& topology, std::chrono::milliseconds timeout,
                    const std::string& where) {
  const std::string world = std::to_string(topology.world_size);
  store.set(rank_key(topology.rank), std::vector<uint8_t>(world.begin(), world.end()));
  std::vector<std::string> keys;
  for (int r = 0; r < topology.world_size; ++r) keys.push_back(rank_key(r));
  std::exception_ptr timed_out;
  try {
    store.wait(keys, timeout);
  } catch (const TimeoutError&) {
    timed_out = std::current_exception();
  } catch (const c10::Error&) {  // c10d's client times out with its own error
    timed_out = std::current_exception();
  }
  if (timed_out) {
    std::pair<std::string, int> missing;
    try {
      missing = missing_ranks(store, topology);
    } catch (const std::exception&) {
      std::rethrow_exception(timed_out);  // the store itself failed: say that
    }
    if (missing.second == 0) std::rethrow_exception(timed_out);
    throw RendezvousError(base::detail::str(
        "rendezvous at ", where, " timed out after ", timeout.count(), " ms: ", missing.second,
        " of ", world, " ranks never joined (missing: ", missing.first,
        "). Start every rank with the same MASTER_ADDR, MASTER_PORT and WORLD_SIZE, check that "
        "none of them failed at start-up, or raise the rendezvous timeout."));
  }
  for (int r = 0; r < topology.world_size; ++r) {
    auto value = store.get(rank_key(r));
    std::string theirs(value.begin(), value.end());
    if (theirs != world) {
      throw ConfigError(base::detail::str("rank ", r, " was started with world size ", theirs,
                                          " but rank ", topology.rank, " with ", world,
                                          ": every rank must be given the same WORLD_SIZE."));
    }
  }
}

// The job's secret, from the file ddprun (or the user) names; without one
// the store admits anyone who can reach it, as c10d's does, and rank 0 says
// so once.
std::string job_secret(const EnvironmentMap& env, const Topology& topology) {
  const auto file = env.find(store::kJobSecretFileVariable);
  if (file != env.end() && !file->second.empty()) return store::read_job_secret(file->second);
  if (topology.rank == 0) {
    const std::string& host = topology.master_addr;
    const bool loopback = host == "localhost" || host == "::1" || host.rfind("127.", 0) == 0;
    std::cerr << "ddp: warning: the rendezvous store at " << host << ":" << topology.master_port
              << " has no job secret, so "
              << (loopback ? "any process on this machine" : "any machine that reaches it")
              << " can read and change the job's keys. Start the job with ddprun, or set "
              << store::kJobSecretFileVariable << " on every rank to the same secret file."
              << std::endl;
  }
  return {};
}

// Note [Joining torchrun's store]
// torchrun's agent hosts a c10d TCPStore at MASTER_ADDR:MASTER_PORT and says
// so with TORCHELASTIC_USE_AGENT_STORE=True (torchrun 2.x in every launch
// mode unless TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1, 1.x with its static
// rendezvous): the port is the agent's, so no worker may host a store there. Every rank, rank 0
// included, joins it with c10d's own client, which speaks the server's protocol, under the prefix
// "/worker/attempt_<TORCHELASTIC_RESTART_COUNT>" that torchrun's Python
// workers use in 1.x. PyTorch 2.6's workers use none ("a new TCPStore for
// every retry" in torch/distributed/rendezvous.py), but only the client is
// new: the agent keeps its server across restarts (the static rendezvous's
// store, the c10d rendezvous's shared one made once per agent), so without
// the prefix a restarted job would find the failed attempt's keys. The
// store authenticates no one: ddp's job secret applies only where ddp hosts
// the store, and rank 0 says so once.
std::string agent_store_prefix(const Topology& topology) {
  return base::detail::str("/worker/attempt_", topology.restart_count);
}

base::compat::StorePtr join_agent_store(const Topology& topology, const EnvironmentMap& env,
                                        std::chrono::milliseconds timeout) {
  const std::string endpoint = store::format_endpoint(topology.master_addr, topology.master_port);
  c10::intrusive_ptr<c10d::Store> client;
  try {
    client = base::compat::make_c10d_tcp_store(topology.master_addr, topology.master_port,
                                               /*is_server=*/false, timeout);
  } catch (const c10::Error& error) {
    const std::string why = error.what_without_backtrace();
    throw RendezvousError(base::detail::str(
        "cannot reach torchrun's rendezvous store at ", endpoint, " (", kAgentStoreVariable,
        "=True) within ", timeout.count(), " ms: ", why.substr(0, why.find('\n')),
        ". The torchrun agent of the first node (GROUP_RANK 0) hosts it: check that it still runs "
        "and that this machine reaches MASTER_ADDR."));
  }
  if (topology.rank == 0) {
    const bool secret = env.count(store::kJobSecretFileVariable) > 0;
    std::cerr << "ddp: warning: the rendezvous store at " << endpoint
              << " is torchrun's, which authenticates no one (PyTorch's SECURITY.md) and "
                 "listens on every interface, so any machine that reaches port "
              << topology.master_port << " of its host can read and change the job's keys"
              << (secret ? std::string(" (") + store::kJobSecretFileVariable +
                               " is not used: only a store ddp hosts checks it)"
                         : std::string())
              << ". Run torchrun jobs on a trusted network only, or start the job with ddprun, "
                 "whose store admits only the job's ranks."
              << std::endl;
  }
  auto store = c10::make_intrusive<c10d::PrefixStore>(agent_store_prefix(topology), client);
  join_all_ranks(*store, topology, timeout, "torchrun's store at " + endpoint);
  return store;
}

// The rendezvous store: a TcpStore hosted by rank 0, or torchrun's agent's
// (a HashStore alone).
base::compat::StorePtr connect_store(const Topology& topology, const EnvironmentMap& env,
                                     std::chrono::milliseconds timeout) {
  if (topology.world_size == 1) return c10::make_intrusive<c10d::HashStore>();
  if (topology.agent_store) return join_agent_store(topology, env, timeout);
  auto store = c10::make_intrusive<TcpStore>(TcpStoreOptions()
                                                 .host(topology.master_addr)
                                                 .port(topology.master_port)
                                                 .is_server(topology.rank == 0)
                                                 .timeout(timeout)
                                                 .secret(job_secret(env, topology)));
  join_all_ranks(*store, topology, timeout,
                 base::detail::str(topology.master_addr, ":", topology.master_port));
  return store;
}

// The backend InitOptions::backend names.
std::shared_ptr<ProcessGroup> make_group(const InitOptions& options, const EnvironmentMap& env,
                                         base::compat::StorePtr& rendezvous) {
  validate(options);
  TopologyOverrides overrides;
  overrides.rank = options.rank();
  overrides.world_size = options.world_size();
  overrides.local_rank = options.local_rank();
  overrides.local_world_size = options.local_world_size();
  overrides.master_addr = options.master_addr();
  overrides.master_port = options.master_port();

  backends::BackendContext context;
  context.topology = resolve_topology(env, overrides);
  context.collective_timeout = options.collective_timeout();
  context.gloo_interface = options.gloo_interface();
  if (context.gloo_interface.empty() && env.count("GLOO_SOCKET_IFNAME")) {
    context.gloo_interface = env.at("GLOO_SOCKET_IFNAME");
  }
  // Fail before touching the network if the backend cannot exist here.
  if (options.backend() == "nccl" && !backends::nccl_compiled_in()) {
    return backends::make_nccl_process_group(context);
  }
  if (options.store()) {
    rendezvous = options.store();
    join_all_ranks(*rendezvous, context.topology, options.rendezvous_timeout(),
                   "the store of InitOptions::store");
  } else {
    rendezvous = connect_store(context.topology, env, options.rendezvous_timeout());
  }
  context.store = c10::make_intrusive<c10d::PrefixStore>("ddp/backend", rendezvous);
  if (options.backend() == "gloo") return backends::make_gloo_process_group(context);
  if (options.backend() == "nccl") return backends::make_nccl_process_group(context);
  if (options.backend() == "shm") {
    return backends::make_shm_process_group(context, backends::group_ranks_by_node(context));
  }
  return backends::make_auto_process_group(context);
}

// Note [A dead peer is an error, not a signal]
// Gloo writes to its peers with writev(), which raises SIGPIPE when the peer
// has died; by default that kills this process too. A rank that outlives a
// lost peer must instead see its collective fail (and, under
// ddp::elastic::run, wait for the replacement): ElasticZeroRecovery once
// lost the killed rank's buddy to exactly this, and with it the only copy
// of the shard. Python ignores SIGPIPE at start-up, so PyTorch's workers
// never meet it; ddp ignores it here, unless the program installed its own
// handler, which is kept.
void ignore_broken_pipes() {
  struct sigaction current {};
  if (::sigaction(SIGPIPE, nullptr, &current) == 0 && current.sa_handler == SIG_DFL) {
    ::signal(SIGPIPE, SIG_IGN);
  }
}

}  // namespace

std::shared_ptr<ProcessGroup> init(const InitOptions& options) {
  return init(options, capture_environment());
}

std::shared_ptr<ProcessGroup> init(const InitOptions& options, const EnvironmentMap& env) {
  if (auto spare = env.find(kSpareVariable); spare != env.end()) {
    throw ConfigError(base::detail::str(
        "this process is a hot spare of ddprun --spares (", kSpareVariable, "=", spare->second,
        ") and called ddp::init(): a spare has no rank until it takes a lost worker's, "
        "inside ddp::elastic::run. Train inside elastic::run, or drop --spares."));
  }
  record_uncaught_errors();  // no decorator needed (ddp/comm/error_file.hpp)
  ignore_broken_pipes();     // Note [A dead peer is an error, not a signal]
  base::compat::StorePtr rendezvous;
  std::shared_ptr<ProcessGroup> group = make_group(options, env, rendezvous);
  if (rendezvous) {  // the group shares the store; this keeps it alive
    group->set_rendezvous_store(
        std::shared_ptr<c10d::Store>(rendezvous.get(), [rendezvous](c10d::Store*) {}));
  }
  // The observers (Note [Observing collectives]): the flight recorder always
  // records; then those the parts registered, the timeline's among them
  // (Note [Parts attach observers through a registry]).
  flight_recorder::recorded(group);
  flight_recorder::detail::record_to_file_from_environment(env, group->rank(), group->size());
  for (const ObserverFactory& factory : registered_observer_factories()) {
    if (std::shared_ptr<CollectiveObserver> observer = factory(*group, env)) {
      group->add_observer(std::move(observer));
    }
  }
  return group;
}

}  // namespace ddp::comm

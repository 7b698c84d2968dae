#include "launch/node_rendezvous.hpp"

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <algorithm>
#include <thread>

#include "ddp/errors.hpp"
#include "ddp/tcp_store.hpp"

namespace ddp::launch {
namespace {

using Clock = std::chrono::steady_clock;

std::vector<uint8_t> bytes(const std::string& text) { return {text.begin(), text.end()}; }
std::string text(const std::vector<uint8_t>& value) { return {value.begin(), value.end()}; }

std::string endpoint(const LaunchPlan& plan) {
  return plan.store_host + ":" + std::to_string(plan.store_port);
}

std::string seconds(std::chrono::milliseconds duration) {
  const auto ms = duration.count();
  return std::to_string(ms / 1000) + (ms % 1000 ? "." + std::to_string(ms % 1000 / 100) : "") +
         " s";
}

c10::intrusive_ptr<c10d::Store> storeAt(const LaunchPlan& plan, bool server,
                                        const std::string& secret) {
  return c10::make_intrusive<TcpStore>(TcpStoreOptions()
                                           .host(plan.store_host)
                                           .port(plan.store_port)
                                           .is_server(server)
                                           .timeout(plan.rendezvous_timeout)
                                           .secret(secret));
}

// The host names the job; every other node must belong to it.
void claimRunId(c10d::Store& store, bool host, const LaunchPlan& plan) {
  const std::string mine = plan.options.run_id;
  if (host) store.set("ddprun/run_id", bytes(mine));
  store.wait({"ddprun/run_id"}, plan.rendezvous_timeout);
  const std::string owner = text(store.get("ddprun/run_id"));
  if (owner != mine) {
    throw RendezvousError("the launcher at " + endpoint(plan) + " belongs to run '" + owner +
                          "', not to this run '" + mine +
                          "'. Give every node of one job the same --rdzv-id (--run-id), and "
                          "separate jobs different ports.");
  }
}

// c10d: the host closes the round (Note [How nodes meet]) and returns the
// node count.
int closeRound(c10d::Store& store, const LaunchPlan& plan, const std::string& prefix) {
  const auto start = Clock::now();
  auto minimum_reached = Clock::time_point::max();
  while (true) {
    const int joined = 1 + static_cast<int>(store.add(prefix + "joined", 0));
    const auto now = Clock::now();
    if (joined >= plan.min_nodes && minimum_reached == Clock::time_point::max()) {
      minimum_reached = now;
    }
    if (joined >= plan.max_nodes || now - minimum_reached >= plan.last_call_timeout) {
      return std::min(joined, plan.max_nodes);
    }
    if (now - start >= plan.rendezvous_timeout) {
      throw TimeoutError("only " + std::to_string(joined) + " of at least " +
                         std::to_string(plan.min_nodes) + " node(s) joined the rendezvous at " +
                         endpoint(plan) + " within its join_timeout of " +
                         seconds(plan.rendezvous_timeout) +
                         ". Start ddprun on the other nodes with the same --rdzv-endpoint and "
                         "--rdzv-id, or lower --nnodes.");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

NodeAssignment meetC10d(const LaunchPlan& plan, const std::string& secret) {
  NodeAssignment node;
  bool host = false;
  if (plan.is_host.value_or(true)) {
    try {
      node.store = storeAt(plan, /*server=*/true, secret);
      host = true;
    } catch (const RendezvousError&) {
      if (plan.is_host.value_or(false)) throw;  // told to host: say why it cannot
    }
  }
  if (!host) node.store = storeAt(plan, /*server=*/false, secret);
  claimRunId(*node.store, host, plan);
  const std::string prefix = "ddprun/" + plan.options.run_id + "/rdzv/";
  if (host) {
    const std::string& local = plan.options.local_addr;
    node.store->set(prefix + "master_addr", bytes(local.empty() ? plan.store_host : local));
    node.nnodes = closeRound(*node.store, plan, prefix);
    node.store->set(prefix + "nnodes", bytes(std::to_string(node.nnodes)));
  } else {
    node.node_rank = static_cast<int>(node.store->add(prefix + "joined", 1));
    node.store->wait({prefix + "nnodes"}, plan.rendezvous_timeout);
    node.nnodes = std::stoi(text(node.store->get(prefix + "nnodes")));
    if (node.node_rank >= node.nnodes) {
      throw RendezvousError(
          "this node joined the rendezvous at " + endpoint(plan) +
          " after the job had started "
          "with " +
          std::to_string(node.nnodes) + " node(s) (--nnodes " + plan.options.nnodes +
          ", last_call_timeout " + seconds(plan.last_call_timeout) +
          "). Start the nodes within the last call, or raise --rdzv-conf last_call_timeout.");
    }
  }
  node.master_addr = text(node.store->get(prefix + "master_addr"));
  return node;
}

}  // namespace

NodeAssignment meet_nodes(const LaunchPlan& plan, const std::string& secret) {
  NodeAssignment node;
  const auto& o = plan.options;
  if (plan.max_nodes == 1) {
    node.store = c10::make_intrusive<c10d::HashStore>();
    if (!o.standalone) node.master_addr = plan.c10d ? "127.0.0.1" : o.master_addr;
    if (!o.local_addr.empty() && !o.standalone) node.master_addr = o.local_addr;
    claimRunId(*node.store, /*host=*/true, plan);
    return node;
  }
  if (plan.c10d) return meetC10d(plan, secret);
  node.store = storeAt(plan, /*server=*/o.node_rank == 0, secret);
  claimRunId(*node.store, o.node_rank == 0, plan);
  node.node_rank = o.node_rank;
  node.nnodes = plan.max_nodes;
  node.master_addr = o.master_addr;
  return node;
}

}  // namespace ddp::launch

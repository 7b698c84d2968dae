#include "ddp/launch/node_rendezvous.hpp"

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <algorithm>
#include <thread>

#include "ddp/comm/errors.hpp"
#include "ddp/comm/tcp_store.hpp"
#include "comm/str.hpp"
#include "comm/store/store_value.hpp"

namespace ddp::launch {
namespace {

using Clock = std::chrono::steady_clock;

std::string endpoint(const LaunchPlan& plan) {
  return comm::detail::str(plan.store_host, ":", plan.store_port);
}

std::string seconds(std::chrono::milliseconds duration) {
  const auto ms = duration.count();
  return comm::detail::str(ms / 1000, ms % 1000 ? comm::detail::str(".", ms % 1000 / 100) : "",
                           " s");
}

c10::intrusive_ptr<c10d::Store> store_at(const LaunchPlan& plan, bool server,
                                         const std::string& secret) {
  return c10::make_intrusive<TcpStore>(TcpStoreOptions()
                                           .host(plan.store_host)
                                           .port(plan.store_port)
                                           .is_server(server)
                                           .timeout(plan.rendezvous_timeout)
                                           .secret(secret));
}

// The host names the job; every other node must belong to it.
void claim_run_id(c10d::Store& store, bool host, const LaunchPlan& plan) {
  const std::string mine = plan.options.run_id;
  if (host) store.set("ddprun/run_id", comm::store::as_bytes(mine));
  store.wait({"ddprun/run_id"}, plan.rendezvous_timeout);
  const std::string owner = comm::store::as_text(store.get("ddprun/run_id"));
  if (owner != mine) {
    throw RendezvousError("the launcher at " + endpoint(plan) + " belongs to run '" + owner +
                          "', not to this run '" + mine +
                          "'. Give every node of one job the same --rdzv-id (--run-id), and "
                          "separate jobs different ports.");
  }
}

}  // namespace

NodeRendezvous::NodeRendezvous(const LaunchPlan& plan, const std::string& secret) : plan_(plan) {
  if (plan.max_nodes == 1) {
    store_ = c10::make_intrusive<c10d::HashStore>();
    host_ = true;
  } else if (!plan.c10d) {
    host_ = plan.options.node_rank == 0;
    store_ = store_at(plan, host_, secret);
  } else {
    if (plan.is_host.value_or(true)) {
      try {
        store_ = store_at(plan, /*server=*/true, secret);
        host_ = true;
      } catch (const RendezvousError&) {
        if (plan.is_host.value_or(false)) throw;  // told to host: say why it cannot
      }
    }
    if (!host_) store_ = store_at(plan, /*server=*/false, secret);
  }
  claim_run_id(*store_, host_, plan);
  if (host_ && plan.c10d) {
    const std::string& local = plan.options.local_addr;
    store_->set(key(-1, "master_addr"),
                comm::store::as_bytes(local.empty() ? plan.store_host : local));
  }
}

NodeRendezvous::~NodeRendezvous() = default;

std::string NodeRendezvous::key(int round, const std::string& name) const {
  return "ddprun/" + plan_.options.run_id + "/rdzv/" +
         (round < 0 ? std::string() : comm::detail::str(round, "/")) + name;
}

NodeAssignment NodeRendezvous::next_round() {
  const auto& o = plan_.options;
  NodeAssignment node;
  if (!plan_.c10d || plan_.max_nodes == 1) {
    node.round = ++next_round_;
    node.node_rank = plan_.max_nodes == 1 ? 0 : o.node_rank;
    node.nnodes = plan_.max_nodes;
    if (!o.standalone) node.master_addr = plan_.c10d ? "127.0.0.1" : o.master_addr;
    if (plan_.max_nodes == 1 && !o.standalone && !o.local_addr.empty()) {
      node.master_addr = o.local_addr;
    }
    return node;
  }
  if (next_round_ < 0) {
    // A node that arrives at a running job joins the round after it.
    next_round_ = 0;
    if (!host_ && store_->check({key(-1, "closed")})) {
      next_round_ = std::stoi(comm::store::as_text(store_->get(key(-1, "closed")))) + 1;
    }
  }
  int round = next_round_;
  if (host_) {
    node.nnodes = close_round(round);
    store_->set(key(round, "nnodes"), comm::store::as_bytes(std::to_string(node.nnodes)));
    store_->set(key(-1, "closed"), comm::store::as_bytes(std::to_string(round)));
  } else {
    while (true) {
      node.node_rank = static_cast<int>(store_->add(key(round, "joined"), 1));
      store_->wait({key(round, "nnodes")}, plan_.rendezvous_timeout);
      node.nnodes = std::stoi(comm::store::as_text(store_->get(key(round, "nnodes"))));
      if (node.node_rank < node.nnodes) break;
      // The round closed without this node (it was full, or the last call
      // had passed): wait in the next one.
      ++round;
    }
  }
  node.round = round;
  node.master_addr = comm::store::as_text(store_->get(key(-1, "master_addr")));
  next_round_ = round + 1;
  return node;
}

bool NodeRendezvous::nodes_waiting(const NodeAssignment& running) {
  if (!plan_.c10d || running.nnodes >= plan_.max_nodes) return false;
  return store_->add(key(running.round + 1, "joined"), 0) > 0;
}

// The host closes round `round` (Note [How nodes meet]) and returns its
// node count.
int NodeRendezvous::close_round(int round) {
  const auto start = Clock::now();
  auto minimum_reached = Clock::time_point::max();
  while (true) {
    const int joined = 1 + static_cast<int>(store_->add(key(round, "joined"), 0));
    const auto now = Clock::now();
    if (joined >= plan_.min_nodes && minimum_reached == Clock::time_point::max()) {
      minimum_reached = now;
    }
    if (joined >= plan_.max_nodes || now - minimum_reached >= plan_.last_call_timeout) {
      return std::min(joined, plan_.max_nodes);
    }
    if (now - start >= plan_.rendezvous_timeout) {
      throw TimeoutError(comm::detail::str(
          "only ", joined, " of at least ", plan_.min_nodes, " node(s) joined the rendezvous at ",
          endpoint(plan_), " within its join_timeout of ", seconds(plan_.rendezvous_timeout),
          ". Start ddprun on the other nodes with the same --rdzv-endpoint and --rdzv-id, or lower "
          "--nnodes."));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace ddp::launch

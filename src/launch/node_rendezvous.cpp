#include "launch/node_rendezvous.hpp"

#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <algorithm>
#include <thread>
#include <utility>

#include "base/str.hpp"
#include "comm/store/store_value.hpp"
#include "comm/store/worker_protocol.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/tcp_store.hpp"
#include "launch/endpoint.hpp"
#include "launch/host_succession.hpp"
#include "launch/say.hpp"

namespace ddp::launch {
namespace {

using Clock = std::chrono::steady_clock;

std::string endpoint(const LaunchPlan& plan) {
  return base::detail::str(plan.store_host, ":", plan.store_port);
}

c10::intrusive_ptr<c10d::Store> store_at(const LaunchPlan& plan, bool server,
                                         const std::string& secret) {
  return c10::make_intrusive<TcpStore>(TcpStoreOptions()
                                           .host(plan.store_host)
                                           .port(plan.store_port)
                                           .is_server(server)
                                           .timeout(plan.rendezvous_timeout)
                                           .secret(secret)
                                           .hosted_by("node 0's ddprun"));
}

// The host names the job; every other node must belong to it.
void claim_run_id(c10d::Store& store, bool host, const LaunchPlan& plan) {
  const std::string mine = plan.options.run_id;
  if (host) store.set(comm::store::run_id_key(), comm::store::as_bytes(mine));
  store.wait({comm::store::run_id_key()}, plan.rendezvous_timeout);
  const std::string owner = comm::store::as_text(store.get(comm::store::run_id_key()));
  if (owner != mine) {
    throw RendezvousError("the launcher at " + endpoint(plan) + " belongs to run '" + owner +
                          "', not to this run '" + mine +
                          "'. Give every node of one job the same --rdzv-id (--run-id), and "
                          "separate jobs different ports.");
  }
}

}  // namespace

NodeRendezvous::NodeRendezvous(const LaunchPlan& plan, const std::string& secret)
    : plan_(plan), endpoint_(endpoint(plan)) {
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
  if (plan.c10d && plan.max_nodes >= 3) {
    succession_ = std::make_unique<HostSuccession>(plan, secret);
  }
  if (host_ && plan.c10d) {
    const std::string& local = plan.options.local_addr;
    store_->set(key(-1, "master_addr"),
                comm::store::as_bytes(local.empty() ? plan.store_host : local));
  }
}

NodeRendezvous::~NodeRendezvous() = default;

std::string NodeRendezvous::key(int round, const std::string& name) const {
  return comm::store::rendezvous_key(plan_.options.run_id, round, name);
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
      if (member_round_ >= 0 && member_round_ == round - 1) {
        store_->add(key(round, "returning"), 1);  // before "joined": the host counts both
      }
      node.node_rank = static_cast<int>(store_->add(key(round, "joined"), 1));
      if (spare_for(round)) {
        if (!wait_as_spare(round, node.node_rank)) {
          node.round = round;
          node.job_ended = true;
          return node;
        }
      } else {
        store_->wait({key(round, "nnodes")}, plan_.rendezvous_timeout);
      }
      node.nnodes = std::stoi(comm::store::as_text(store_->get(key(round, "nnodes"))));
      if (node.node_rank < node.nnodes) break;
      // The round closed without this node (it was full, or the last call
      // had passed): wait in the next one.
      ++round;
    }
  }
  node.round = round;
  member_round_ = round;
  member_nnodes_ = node.nnodes;
  node.master_addr = comm::store::as_text(store_->get(key(-1, "master_addr")));
  next_round_ = round + 1;
  if (succession_ && node.nnodes >= 3) {  // Note [A new host]
    std::string address = plan_.options.local_addr;
    if (address.empty()) {
      address = host_ ? node.master_addr : static_cast<TcpStore&>(*store_).local_address();
    }
    succession_->publish(*store_, key(round, ""), round, node.nnodes, node.node_rank, address);
  }
  return node;
}

bool NodeRendezvous::take_over(const std::string& why) {
  if (!succession_ || !succession_->ready() || host_) return false;
  SuccessorStore next = succession_->take_over(endpoint_, why);
  store_ = std::move(next.store);
  host_ = next.host;
  endpoint_ = next.endpoint;
  next_round_ = next.after_round + 1;
  quorum_of_ = next.nodes_before;
  if (host_) {
    const std::string& local = plan_.options.local_addr;
    store_->set(key(-1, "master_addr"),
                comm::store::as_bytes(local.empty() ? split_endpoint(endpoint_).first : local));
  }
  return true;
}

int NodeRendezvous::nodes_joined_next(const NodeAssignment& running) {
  return static_cast<int>(store_->add(key(running.round + 1, "joined"), 0));
}

bool NodeRendezvous::nodes_waiting(const NodeAssignment& running) {
  if (!plan_.c10d || running.nnodes >= plan_.max_nodes) return false;
  return nodes_joined_next(running) > 0;
}

// Note [Spare nodes]: a node that is not in round - 1, which closed with
// MAX nodes, waits for `round` as a spare: nothing opens that round until
// the running job re-forms after a failure.
bool NodeRendezvous::spare_for(int round) {
  if (round == 0 || member_round_ == round - 1) return false;
  const std::string previous = key(round - 1, "nnodes");
  if (!store_->check({previous})) return false;
  if (std::stoi(comm::store::as_text(store_->get(previous))) < plan_.max_nodes) return false;
  if (!said_spare_) {
    said_spare_ = true;
    say(base::detail::str("the job '", plan_.options.run_id, "' runs at its --nnodes MAX of ",
                          plan_.max_nodes, " nodes; this node waits as a spare node for round ",
                          round, " (it joins when a node is lost; gives up after join_timeout ",
                          in_seconds(plan_.rendezvous_timeout), ")"));
  }
  return true;
}

// Waits, as a spare node with `rank` in `round`, until the round closes
// (true) or the job ends (false: the host said so, and is told this node
// saw it).
bool NodeRendezvous::wait_as_spare(int round, int rank) {
  const auto start = Clock::now();
  while (true) {
    bool closed = false;
    bool ended = false;
    try {
      closed = store_->check({key(round, "nnodes")});
      ended = !closed && store_->check({key(-1, "ended")});
      if (ended) store_->add(key(-1, "ended_seen"), 1);
    } catch (const RendezvousError& error) {
      throw RendezvousError(base::detail::str(
          "this node waited as a spare node of the job '", plan_.options.run_id,
          "' and lost the job's store at ", endpoint_, " after ",
          in_seconds(std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - start)),
          ": the job has ended or its host was lost (", error.what(),
          "). Start this node again with the next job."));
    }
    if (closed) return true;
    if (ended) return false;
    if (Clock::now() - start >= plan_.rendezvous_timeout) {
      try {  // withdraw, unless a later node already counted on this one's place
        store_->compareSet(key(round, "joined"), comm::store::as_bytes(std::to_string(rank)),
                           comm::store::as_bytes(std::to_string(rank - 1)));
      } catch (const RendezvousError&) {
        // The store is gone: nothing to withdraw from.
      }
      throw RendezvousError(base::detail::str(
          "this node waited as a spare node of the job '", plan_.options.run_id, "' at ", endpoint_,
          " for ", in_seconds(plan_.rendezvous_timeout),
          " (its join_timeout) and no node of the job, which runs at its --nnodes MAX of ",
          plan_.max_nodes,
          ", was lost. Start it again later, raise --nnodes MAX for the next job, or give a "
          "longer --rdzv-conf join_timeout to keep it waiting."));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
}

void NodeRendezvous::end_job(const NodeAssignment& last, std::chrono::milliseconds patience) {
  if (!host_ || !plan_.c10d || plan_.max_nodes == 1) return;
  store_->set(key(-1, "ended"), comm::store::as_bytes(std::to_string(last.round)));
  // Spare nodes waiting for the next round read that the job ended before
  // the store goes away with this node.
  const auto give_up = Clock::now() + patience;
  while (store_->add(key(-1, "ended_seen"), 0) < store_->add(key(last.round + 1, "joined"), 0) &&
         Clock::now() < give_up) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// Note [A new host]: the old host closes a round after one of three nodes
// or more only with at least half of them back, and gives them the last
// call to come.
void NodeRendezvous::check_majority_returned(int round) {
  if (!succession_ || member_round_ != round - 1 || member_nnodes_ < 3) return;
  const int returning = 1 + static_cast<int>(store_->add(key(round, "returning"), 0));
  if (2 * returning >= member_nnodes_) return;
  throw RendezvousError(base::detail::str(
      "only ", returning, " of the ", member_nnodes_, " node(s) of round ", round - 1,
      " came back to the rendezvous at ", endpoint_, " (this one included); the others may have ",
      "re-formed the job around a standby, so this node ends rather than run it a second time. "
      "If they are gone, start the job again."));
}

// The host closes round `round` (Note [How nodes meet]) and returns its
// node count.
int NodeRendezvous::close_round(int round) {
  const auto start = Clock::now();
  auto minimum_reached = Clock::time_point::max();
  const int quorum_of = std::exchange(quorum_of_, 0);
  const int expected = std::exchange(expected_nodes_, 0);
  while (true) {
    const int joined = 1 + static_cast<int>(store_->add(key(round, "joined"), 0));
    const auto now = Clock::now();
    if (quorum_of > 0) {  // after a take-over (Note [A new host])
      const bool all = joined >= std::min(quorum_of - 1, plan_.max_nodes);
      if (!all && now - start < plan_.last_call_timeout) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
        continue;
      }
      if (2 * joined <= quorum_of || joined < plan_.min_nodes) {
        throw RendezvousError(base::detail::str(
            "after the host was lost, only ", joined, " of the ", quorum_of,
            " node(s) of the last round joined its successor at ", endpoint_, " within ",
            in_seconds(plan_.last_call_timeout),
            " (last_call_timeout); re-forming needs more than half of them and at least --nnodes "
            "MIN (",
            plan_.min_nodes,
            "), so that nodes cut off from the others never run a job of their "
            "own. Start the job again."));
      }
      return std::min(joined, plan_.max_nodes);
    }
    if (joined >= plan_.min_nodes && minimum_reached == Clock::time_point::max()) {
      minimum_reached = now;
    }
    const bool closing = joined >= plan_.max_nodes || (expected > 0 && joined >= expected) ||
                         now - minimum_reached >= plan_.last_call_timeout;
    // The last call is also as long as a minority host waits for the others.
    if (closing || now - start >= plan_.last_call_timeout) check_majority_returned(round);
    if (closing) return std::min(joined, plan_.max_nodes);
    if (now - start >= plan_.rendezvous_timeout) {
      throw TimeoutError(base::detail::str(
          "only ", joined, " of at least ", plan_.min_nodes, " node(s) joined the rendezvous at ",
          endpoint_, " within its join_timeout of ", in_seconds(plan_.rendezvous_timeout),
          ". Start ddprun on the other nodes with the same --rdzv-endpoint and --rdzv-id, or lower "
          "--nnodes."));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace ddp::launch

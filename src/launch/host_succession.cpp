#include "launch/host_succession.hpp"

#include <utility>

#include "base/str.hpp"
#include "comm/store/store_value.hpp"
#include "comm/store/worker_protocol.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/tcp_store.hpp"
#include "launch/endpoint.hpp"
#include "launch/say.hpp"

namespace ddp::launch {

HostSuccession::HostSuccession(const LaunchPlan& plan, std::string secret)
    : plan_(plan), secret_(std::move(secret)) {}

void HostSuccession::publish(c10d::Store& store, const std::string& prefix, int round, int nnodes,
                             int node_rank, const std::string& address) {
  round_ = round;
  node_rank_ = node_rank;
  standbys_.assign(static_cast<size_t>(nnodes), std::string());
  reserved_.reset();
  if (node_rank > 0) {
    reserved_.emplace();
    store.set(base::detail::str(prefix, "standby/", node_rank),
              comm::store::as_bytes(base::detail::str(address, ":", reserved_->port())));
  }
  for (int node = 1; node < nnodes; ++node) {
    const std::string key = base::detail::str(prefix, "standby/", node);
    store.wait({key}, plan_.rendezvous_timeout);
    standbys_[static_cast<size_t>(node)] = comm::store::as_text(store.get(key));
  }
}

// The candidate in its turn: hosts the store at its reserved port (the
// reservation lets a bind by number through) and names it for the others.
c10::intrusive_ptr<c10d::Store> HostSuccession::host_at(const std::string& endpoint) {
  const auto [host, port] = split_endpoint(endpoint);
  auto store = c10::make_intrusive<TcpStore>(TcpStoreOptions()
                                                 .host(host)
                                                 .port(port)
                                                 .is_server(true)
                                                 .timeout(plan_.rendezvous_timeout)
                                                 .secret(secret_)
                                                 .hosted_by("this node's ddprun"));
  reserved_.reset();
  store->set(comm::store::run_id_key(), comm::store::as_bytes(plan_.options.run_id));
  store->set(comm::store::takeover_key(),
             comm::store::as_bytes(base::detail::str(takeovers_, ":", round_)));
  return store;
}

// Another node's turn: its store, once it says it took over from the same
// round of the same run; nullptr when it does not answer in time.
c10::intrusive_ptr<c10d::Store> HostSuccession::join_at(const std::string& endpoint,
                                                        int candidate) {
  const auto [host, port] = split_endpoint(endpoint);
  const std::string expected = base::detail::str(takeovers_, ":", round_);
  try {
    auto store = c10::make_intrusive<TcpStore>(
        TcpStoreOptions()
            .host(host)
            .port(port)
            .timeout(plan_.takeover_timeout)
            .secret(secret_)
            .hosted_by(base::detail::str("node ", candidate, "'s ddprun")));
    store->wait({comm::store::takeover_key()}, plan_.takeover_timeout);
    const std::string run = comm::store::as_text(store->get(comm::store::run_id_key()));
    const std::string takeover = comm::store::as_text(store->get(comm::store::takeover_key()));
    if (run == plan_.options.run_id && takeover == expected) {
      store->setTimeout(plan_.rendezvous_timeout);
      return store;
    }
    say(base::detail::str("node ", candidate, "'s standby at ", endpoint, " serves run '", run,
                          "', take-over ", takeover, ", not run '", plan_.options.run_id,
                          "', take-over ", expected, "; trying the next standby"));
  } catch (const Error& error) {  // RendezvousError, TimeoutError
    say(base::detail::str("node ", candidate, "'s standby at ", endpoint, " did not take over ",
                          "within takeover_timeout ", in_seconds(plan_.takeover_timeout), " (",
                          error.what(), "); trying the next standby"));
  }
  return {};
}

SuccessorStore HostSuccession::take_over(const std::string& lost, const std::string& why) {
  ++takeovers_;
  SuccessorStore next;
  next.after_round = round_;
  next.nodes_before = static_cast<int>(standbys_.size());
  for (int candidate = 1; candidate < next.nodes_before; ++candidate) {
    const std::string& endpoint = standbys_[static_cast<size_t>(candidate)];
    if (candidate == node_rank_) {
      next.store = host_at(endpoint);
      next.host = true;
      say(base::detail::str("lost the rendezvous store at ", lost, " (node 0): ", why,
                            "; this node hosts it now at ", endpoint, " (take-over ", takeovers_,
                            ", after round ", round_, ")"));
    } else if (auto store = join_at(endpoint, candidate)) {
      next.store = std::move(store);
      say(base::detail::str("lost the rendezvous store at ", lost, " (node 0): ", why, "; node ",
                            candidate, "'s standby at ", endpoint, " hosts it now (take-over ",
                            takeovers_, ", after round ", round_, ")"));
    }
    if (next.store) {
      next.endpoint = endpoint;
      standbys_.clear();  // the next round publishes a new succession
      return next;
    }
  }
  throw RendezvousError(base::detail::str(
      "lost the rendezvous store at ", lost, " (", why, ") and none of the ", next.nodes_before - 1,
      " standby node(s) of round ", round_, " took it over within ", "takeover_timeout ",
      in_seconds(plan_.takeover_timeout),
      " each. Start the job again; a longer --rdzv-conf takeover_timeout helps when nodes are "
      "slow to notice a lost host."));
}

}  // namespace ddp::launch

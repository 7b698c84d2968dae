#include "ddp/elastic/run.hpp"

#include <torch/csrc/distributed/c10d/PrefixStore.hpp>

#include <chrono>
#include <iostream>
#include <string>
#include <thread>

#include "ddp/comm/errors.hpp"
#include "ddp/comm/tcp_store.hpp"
#include "comm/store/job_secret.hpp"
#include "comm/str.hpp"

namespace ddp::elastic {
namespace {

using Clock = std::chrono::steady_clock;

std::string first_line(const std::string& text) { return text.substr(0, text.find('\n')); }

int64_t milliseconds(Clock::duration d) {
  return std::chrono::duration_cast<std::chrono::milliseconds>(d).count();
}

// The worker's side of ddprun's recovery store.
class Generations {
 public:
  Generations(const EnvironmentMap& env, std::chrono::milliseconds timeout) : timeout_(timeout) {
    const std::string address = env.at(kRecoveryStoreVariable);
    const auto colon = address.rfind(':');
    int port = 0;
    try {
      port = colon == std::string::npos ? 0 : std::stoi(address.substr(colon + 1));
    } catch (const std::exception&) {
    }
    if (colon == 0 || port <= 0 || port > 65535) {
      throw ConfigError(std::string(kRecoveryStoreVariable) + " is '" + address +
                        "'; it must be HOST:PORT (ddprun --recovery memory sets it).");
    }
    auto found = env.find(store::kJobSecretFileVariable);
    const std::string secret = found == env.end() || found->second.empty()
                                   ? std::string()
                                   : store::read_job_secret(found->second);
    store_ = c10::make_intrusive<TcpStore>(TcpStoreOptions()
                                               .host(address.substr(0, colon))
                                               .port(port)
                                               .timeout(timeout)
                                               .secret(secret));
    auto given = env.find(kRecoveryGenerationVariable);
    try {
      current_ = given == env.end() ? 0 : std::stoi(given->second);
    } catch (const std::exception&) {
      throw ConfigError(std::string(kRecoveryGenerationVariable) + " is '" + given->second +
                        "'; it must be a generation number (ddprun sets it).");
    }
  }

  int current() const { return current_; }
  int newest() { return static_cast<int>(store_->add(kRecoveryGenerationsKey, 0)); }

  // The store of the current generation, once all `world_size` ranks are in
  // it; false when a newer generation started meanwhile (current() moves
  // to it).
  bool meet(int rank, int world_size, c10::intrusive_ptr<c10d::Store>& met) {
    auto store = c10::make_intrusive<c10d::PrefixStore>(
        comm::detail::str("ddp/generation/", current_), store_);
    store->set(comm::detail::str("present/", rank), std::vector<uint8_t>{1});
    std::vector<std::string> keys;
    for (int r = 0; r < world_size; ++r) keys.push_back(comm::detail::str("present/", r));
    const auto give_up = Clock::now() + timeout_;
    while (!store->check(keys)) {
      if (newest() > current_) {
        current_ = newest();
        return false;
      }
      if (Clock::now() > give_up) {
        throw TimeoutError(comm::detail::str("generation ", current_, " of the job: not all ",
                                             world_size, " ranks joined within ", timeout_.count(),
                                             " ms (RunOptions::rejoin_timeout); a replaced worker "
                                             "may have failed at start-up: read ddprun's log."));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    met = store;
    return true;
  }

  // Waits for the launcher to start a generation after the current one.
  void next() {
    const auto give_up = Clock::now() + timeout_;
    while (newest() <= current_) {
      if (Clock::now() > give_up) {
        throw TimeoutError(comm::detail::str(
            "generation ", current_, " lost a peer and no new generation started within ",
            timeout_.count(),
            " ms (RunOptions::rejoin_timeout): the launcher did not replace the worker. Check that "
            "ddprun has restarts left (--max-restarts)."));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    current_ = newest();
  }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  std::chrono::milliseconds timeout_;
  int current_ = 0;
};

}  // namespace

void run(State& state, const TrainFunction& train, const RunOptions& options) {
  run(state, train, options, capture_environment());
}

void run(State& state, const TrainFunction& train, const RunOptions& options,
         const EnvironmentMap& env) {
  if (env.count(kRecoveryStoreVariable) == 0) {  // one generation: no recovery
    train(init(options.init(), env));
    return;
  }
  const Topology topology = resolve_topology(env);
  Generations generations(env, options.rejoin_timeout());
  std::optional<Clock::time_point> failed_at;
  const std::string who = comm::detail::str("ddp: rank ", topology.rank, ": ");
  while (true) {
    c10::intrusive_ptr<c10d::Store> store;  // a timeout here ends the worker
    if (!generations.meet(topology.rank, topology.world_size, store)) continue;
    std::shared_ptr<ProcessGroup> group;
    try {
      group = init(
          InitOptions(options.init()).store(store).rendezvous_timeout(options.rejoin_timeout()),
          env);
      const std::optional<int> sender = state.sync(*group);
      if (generations.current() > 0) {  // a replacement, or a survivor
        std::cerr << who << "generation " << generations.current() << ": "
                  << (sender ? comm::detail::str("continuing from commit ", state.commits(),
                                                 " of rank ", *sender)
                             : std::string("no rank had committed; starting over"))
                  << (failed_at ? comm::detail::str(" (", milliseconds(Clock::now() - *failed_at),
                                                    " ms after the failure)")
                                : std::string())
                  << std::endl;
      }
      train(group);
      return;
    } catch (const Error& e) {
      const bool lost_peer = dynamic_cast<const CollectiveError*>(&e) ||
                             dynamic_cast<const TimeoutError*>(&e) ||
                             dynamic_cast<const RendezvousError*>(&e);
      if (!lost_peer) throw;
      failed_at = Clock::now();
      std::cerr << who << "generation " << generations.current()
                << " lost a peer: " << first_line(e.what())
                << "; waiting for the launcher's next generation (recovery in memory)" << std::endl;
    }
    group.reset();
    generations.next();
  }
}

}  // namespace ddp::elastic

// ddprun's agent: the heartbeats by which node 0 watches the other nodes,
// and the job's end, when node 0 leaves last (Note [Agent heartbeats] in
// launch/agent.hpp).

#include <chrono>
#include <thread>
#include <vector>

#include "base/str.hpp"
#include "comm/store/store_value.hpp"
#include "launch/agent.hpp"
#include "launch/agent_attempt.hpp"
#include "launch/say.hpp"

namespace ddp::launch {

// Node 0 hosts the store: it leaves last, once every agent has read what it
// needs of this attempt, or stopped its heartbeat (Note [Agent
// heartbeats]); spare nodes are told the job ended.
void Agent::leave(Attempt& attempt) {
  auto& store = rendezvous_->store();
  store.set(key(attempt.number, base::detail::str("left/", node_.node_rank)),
            comm::store::as_bytes("1"));
  if (node_.node_rank != 0) return;
  std::vector<int> waiting;
  for (int node = 1; node < node_.nnodes; ++node) waiting.push_back(node);
  const auto give_up = std::chrono::steady_clock::now() + plan_.rendezvous_timeout;
  while (!waiting.empty() && std::chrono::steady_clock::now() < give_up) {
    beat(attempt);
    for (auto it = waiting.begin(); it != waiting.end();) {
      if (store.check({key(attempt.number, base::detail::str("left/", *it))})) {
        it = waiting.erase(it);
        continue;
      }
      const auto silence = heartbeat_silence(attempt, *it);
      if (attempt.heartbeats[static_cast<size_t>(*it)].gone || silence >= plan_.node_timeout) {
        say(base::detail::str("node ", *it, " stopped its heartbeat ", in_seconds(silence),
                              " ago; not waiting for it"));
        it = waiting.erase(it);
        continue;
      }
      ++it;
    }
    if (!waiting.empty()) std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  rendezvous_->end_job(node_, plan_.node_timeout);
}

void Agent::beat(Attempt& attempt) {
  const auto now = std::chrono::steady_clock::now();
  if (node_.nnodes == 1 || now - attempt.last_beat < plan_.monitor_interval / 2) return;
  attempt.last_beat = now;
  rendezvous_->store().add(key(attempt.number, base::detail::str("heartbeat/", node_.node_rank)),
                           1);
}

// Node 0: how long node `node`'s heartbeat has stood still, as far as it
// has watched it.
std::chrono::milliseconds Agent::heartbeat_silence(Attempt& attempt, int node) {
  auto& seen = attempt.heartbeats[static_cast<size_t>(node)];
  const int64_t count =
      rendezvous_->store().add(key(attempt.number, base::detail::str("heartbeat/", node)), 0);
  const auto now = std::chrono::steady_clock::now();
  if (count != seen.count) {
    seen.count = count;
    seen.changed = now;
  }
  return std::chrono::duration_cast<std::chrono::milliseconds>(now - seen.changed);
}

}  // namespace ddp::launch

#pragma once

// Internal: the store of `ddprun --recovery memory` (Note [Recovery in
// memory] in ddp/elastic/run.hpp). Node 0's agent hosts it, so it outlives
// every worker; the workers of each generation meet in it, and the agents
// count generations in it (comm::store::generations_key()).

#include <c10/util/intrusive_ptr.h>

#include <chrono>
#include <string>
#include <vector>

namespace c10d {
class Store;
}  // namespace c10d

namespace ddp::launch {

class RecoveryStore {
 public:
  /// Node 0 (`host` true) hosts the store on a free port of `address`, the
  /// workers' MASTER_ADDR, and publishes HOST:PORT in `agents` under
  /// `key`; another node reads it there and connects. `secret` (may be
  /// empty) authenticates every client, the workers included.
  /// \throws ddp::RendezvousError or ddp::TimeoutError when the store
  ///   cannot be hosted or reached.
  RecoveryStore(c10d::Store& agents, const std::string& key, bool host, const std::string& address,
                const std::string& secret, std::chrono::milliseconds timeout);
  ~RecoveryStore();

  /// HOST:PORT, for the workers (DDP_RECOVERY_STORE).
  const std::string& address() const { return address_; }
  /// The newest generation.
  int current();
  /// Starts a new generation and returns its number.
  int next();
  /// The store itself (hot spares wait in it: spare_pool.hpp).
  c10d::Store& store() { return *store_; }

 private:
  c10::intrusive_ptr<c10d::Store> store_;
  std::string address_;
};

}  // namespace ddp::launch

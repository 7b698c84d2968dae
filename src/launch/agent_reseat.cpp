// ddprun's agent under --recovery memory: the recovery store's address for
// the workers, and a node's workers kept through a take-over of the store,
// seated at the re-formed job's layout (Note [A new host] in
// launch/node_rendezvous.hpp).

#include <algorithm>

#include "base/str.hpp"
#include "comm/store/store_value.hpp"
#include "comm/store/worker_protocol.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/environment.hpp"
#include "launch/agent.hpp"
#include "launch/agent_attempt.hpp"
#include "launch/say.hpp"
#include "launch/spare_pool.hpp"
#include "launch/worker_environment.hpp"

namespace ddp::launch {

std::string Agent::recovery_store_file() const { return private_dir_ + "/recovery_store"; }

// DDP_RECOVERY_STORE_FILE (Note [The launcher's protocol] in
// comm/store/worker_protocol.hpp), one more count each time.
void Agent::write_recovery_store_file() {
  ++store_moves_;
  comm::store::write_store_file(recovery_store_file(), {store_moves_, recovery_->address()});
}

// The generation a re-formed job starts in: one past the newest that any
// node started or saw, so that every kept worker finds it newer than its own.
int Agent::next_generation(int number) {
  auto& store = rendezvous_->store();
  store.set(key(number, base::detail::str("last_generation/", node_.node_rank)),
            comm::store::as_bytes(std::to_string(generation_seen_)));
  if (node_.node_rank == 0) {
    int newest = 0;
    for (int node = 0; node < node_.nnodes; ++node) {
      const std::string k = key(number, base::detail::str("last_generation/", node));
      store.wait({k}, plan_.rendezvous_timeout);
      newest = std::max(newest, std::stoi(comm::store::as_text(store.get(k))));
    }
    store.set(key(number, "generation"), comm::store::as_bytes(std::to_string(newest + 1)));
  }
  store.wait({key(number, "generation")}, plan_.rendezvous_timeout);
  generation_seen_ = std::stoi(comm::store::as_text(store.get(key(number, "generation"))));
  return generation_seen_;
}

// The kept workers get their places in round `number`: each one's seat,
// keyed by the rank it had, in the new recovery store; generation g starts
// only once every node has seated its workers.
Agent::Attempt Agent::reseat_attempt(Attempt kept, int number) {
  Attempt attempt = std::move(kept);
  attempt.number = number;
  attempt.reported_done = false;
  attempt.failure = {};
  attempt.heartbeats.assign(static_cast<size_t>(node_.nnodes), Attempt::Heartbeat{});
  attempt.last_beat = {};
  const int nproc = static_cast<int>(attempt.workers.size());
  const auto [offset, world_size] = lay_out(number, nproc);
  attempt.world_size = world_size;
  auto& store = rendezvous_->store();
  attempt.port_reservation.reset();
  if (node_.node_rank == 0) {
    attempt.port_reservation.emplace();
    store.set(key(number, "port"),
              comm::store::as_bytes(std::to_string(attempt.port_reservation->port())));
  }
  store.wait({key(number, "port")}, plan_.rendezvous_timeout);
  attempt.port = std::stoi(comm::store::as_text(store.get(key(number, "port"))));
  const int generation = next_generation(number);
  for (int local = 0; local < nproc; ++local) {
    Attempt::Worker& worker = attempt.workers[static_cast<size_t>(local)];
    WorkerPlacement seat = placement(attempt, local, offset + local, generation);
    seat.error_file = worker.error_file;
    seat.flight_recorder_file = worker.flight_recorder_file;
    recovery_->store().set(
        comm::store::reseat_key(generation, worker.rank),
        comm::store::as_bytes(comm::store::encode_seat(worker_environment(plan_, seat))));
    worker.rank = offset + local;
    worker.output->relabel(worker.rank);
  }
  store.set(key(number, base::detail::str("seated/", node_.node_rank)), comm::store::as_bytes("1"));
  if (node_.node_rank == 0) {
    std::vector<std::string> seated;
    for (int node = 0; node < node_.nnodes; ++node) {
      seated.push_back(key(number, base::detail::str("seated/", node)));
    }
    store.wait(seated, plan_.rendezvous_timeout);
    recovery_->store().add(comm::store::generations_key(), generation);
  }
  if (spares_) spares_->fill(placement(attempt, 0, offset, generation));  // after a take-over
  say(base::detail::str("node ", node_.node_rank, ": its ", nproc, " worker(s) keep their state ",
                        "at ranks ", offset, "-", offset + nproc - 1, " of ", world_size,
                        " in generation ", generation, " (round ", number, ")"));
  return attempt;
}

}  // namespace ddp::launch

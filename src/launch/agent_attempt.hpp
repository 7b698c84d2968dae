#pragma once

// Internal: one attempt of ddprun's agent (one rendezvous round): the
// node's workers, each with its process, its output and its files.

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "ddp/launch/child_process.hpp"
#include "ddp/launch/port_reservation.hpp"
#include "launch/agent.hpp"
#include "launch/rank_output.hpp"

namespace ddp::launch {

struct Agent::Attempt {
  struct Worker {
    int rank = 0;
    int local_rank = 0;
    std::string error_file;
    std::string flight_recorder_file;
    std::optional<ChildProcess> process;  // emplaced again for a replacement
    std::optional<RankOutput> output;     // a replacement keeps its predecessor's
  };
  int number = 0;
  int world_size = 0;
  int port = 0;  // the workers' MASTER_PORT
  // Node 0 keeps a port it chose until the attempt ends (Note [A port held
  // from choice to use]).
  std::optional<PortReservation> port_reservation;
  std::vector<Worker> workers;
  bool reported_done = false;
  comm::store::AttemptFailure failure;  // the job's first failure
  // Node 0, when it found a node lost: the spare nodes then waiting.
  int spare_nodes_waiting = 0;
  // Note [Agent heartbeats]: when this node last bumped its counter, and on
  // node 0 what it saw of the others' (by node rank).
  struct Heartbeat {
    int64_t count = -1;
    std::chrono::steady_clock::time_point changed;
    bool gone = false;  // node 0 stopped waiting for it
  };
  std::chrono::steady_clock::time_point last_beat;
  std::vector<Heartbeat> heartbeats;  // one per node of the attempt
};

}  // namespace ddp::launch

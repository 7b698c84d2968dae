#pragma once

// Running the real ddprun from the launcher tests, with deadlines.

#include <chrono>
#include <string>
#include <vector>

#include "ddp/launch/child_process.hpp"

namespace ddp::launch {

// Launcher variables of the test runner itself must not leak into ddprun.
inline const std::vector<std::string> kUnset = {"RANK",
                                                "WORLD_SIZE",
                                                "LOCAL_RANK",
                                                "MASTER_ADDR",
                                                "MASTER_PORT",
                                                "OMP_NUM_THREADS",
                                                "TORCHELASTIC_RESTART_COUNT",
                                                "DDP_JOB_SECRET_FILE"};

inline ChildSpec ddprun(std::vector<std::string> args) {
  args.insert(args.begin(), DDP_DDPRUN);
  return ChildSpec{args, {}, kUnset};
}

inline ChildResult run_launcher(const std::vector<std::string>& args,
                                std::chrono::seconds deadline = std::chrono::seconds(90)) {
  return run_children({ddprun(args)}, deadline).at(0);
}

// ddprun's options for node `node_rank` of a two-node job on loopback, one
// worker per node, meeting at 127.0.0.1:`port`: one restart allowed, the
// workers watched every 0.1 s. The program and its arguments follow.
inline std::vector<std::string> two_node_args(int node_rank, const std::string& port,
                                              const std::string& run_id,
                                              const std::string& rendezvous_timeout) {
  return {"--nnodes",
          "2",
          "--node-rank",
          std::to_string(node_rank),
          "--master-addr",
          "127.0.0.1",
          "--master-port",
          port,
          "--nproc-per-node",
          "1",
          "--run-id",
          run_id,
          "--rendezvous-timeout",
          rendezvous_timeout,
          "--max-restarts",
          "1",
          "--monitor-interval",
          "0.1"};
}

inline bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

// How often `what` occurs in `text`.
inline int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

}  // namespace ddp::launch

#pragma once

// Running the real ddprun from the launcher tests, with deadlines.

#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
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
                                                "OPENBLAS_NUM_THREADS",
                                                "DDP_BLAS_REPORTED",
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

// Whether something accepts connections on 127.0.0.1:`port`.
inline bool host_listens(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(static_cast<uint16_t>(port));
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  const bool ok = connect(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)) == 0;
  close(fd);
  return ok;
}

// Reads `process`'s output until it contains `what` (or 60 s pass).
inline std::string output_until(ChildProcess& process, const std::string& what) {
  std::string output;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(60);
  while (!contains(output, what) && std::chrono::steady_clock::now() < deadline) {
    wait_for_output({&process}, std::chrono::milliseconds(100));
    process.pump([&](Stream, std::string_view chunk) { output.append(chunk); });
  }
  return output;
}

// The rest of `process`'s output, once it exited (or `patience` passed).
inline ChildResult finish(ChildProcess& process, std::string output,
                          std::chrono::seconds patience = std::chrono::seconds(90)) {
  const auto deadline = std::chrono::steady_clock::now() + patience;
  while (!process.reap() && std::chrono::steady_clock::now() < deadline) {
    wait_for_output({&process}, std::chrono::milliseconds(100));
    process.pump([&](Stream, std::string_view chunk) { output.append(chunk); });
  }
  if (!process.exited()) {
    process.signal_group(SIGKILL);
    process.reap_blocking();
  }
  process.pump([&](Stream, std::string_view chunk) { output.append(chunk); });
  ChildResult result;
  result.exit_code = process.exited() ? process.exit_code() : -1;
  result.output = output;
  return result;
}

// Waits (30 s at most) until a node hosts the rendezvous at `port`.
inline void wait_for_host(int port) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!host_listens(port) && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

}  // namespace ddp::launch

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

inline ChildResult runLauncher(const std::vector<std::string>& args,
                               std::chrono::seconds deadline = std::chrono::seconds(90)) {
  return run_children({ddprun(args)}, deadline).at(0);
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

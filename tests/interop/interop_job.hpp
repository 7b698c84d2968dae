#pragma once

// What the interop tests share: the reference job (the toy trainer under
// ddprun, whose final parameters' digest each launcher's run must equal),
// the launcher variables a test must not pass on, and small helpers.

#include <unistd.h>

#include <chrono>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "common/launcher_variables.hpp"
#include "ddp/comm/environment.hpp"
#include "ddp/launch/child_process.hpp"

namespace ddp::interop {

using namespace std::chrono_literals;

/// Every run ends within this, a launcher's start-up (a few seconds of
/// Python for torchrun) included.
inline constexpr auto kDeadline = 240s;

/// The variables of a launcher the test itself may run under
/// (common/launcher_variables.hpp), and those of torchrun's agent, ddp's job
/// secret and a Slurm job: no job the test starts may see them.
inline const std::vector<std::string> kUnsetVariables = [] {
  std::vector<std::string> names = testing::kLauncherVariables;
  names.insert(names.end(), {"TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_USE_AGENT_STORE",
                             "TORCHELASTIC_ERROR_FILE", "DDP_JOB_SECRET_FILE", "SLURM_JOB_ID",
                             "SLURM_JOBID", "SLURM_STEP_ID"});
  return names;
}();

/// The toy trainer's arguments in every interop run, ddprun's reference
/// included: one epoch, 2048 samples / (2 ranks x 32) = 32 steps.
inline const std::vector<std::string> kJob = {"--epochs", "1", "--seed", "5"};

inline bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

/// The `params-digest=` a run printed, or "<none>".
inline std::string digest_of(const std::string& output) {
  std::smatch m;
  return std::regex_search(output, m, std::regex(R"(params-digest=([0-9a-f]{16}))")) ? m[1].str()
                                                                                     : "<none>";
}

/// The executable `name` on PATH, or "".
inline std::string on_path(const std::string& name) {
  const EnvironmentMap env = capture_environment();
  std::stringstream dirs(env.count("PATH") ? env.at("PATH") : "");
  for (std::string dir; std::getline(dirs, dir, ':');) {
    if (!dir.empty() && ::access((dir + "/" + name).c_str(), X_OK) == 0) return dir + "/" + name;
  }
  return "";
}

/// `job` (the toy trainer's arguments) under ddprun, `processes` workers on
/// this machine.
inline launch::ChildResult under_ddprun(int processes, const std::vector<std::string>& job) {
  std::vector<std::string> argv = {DDP_DDPRUN, "--standalone", "--nproc-per-node",
                                   std::to_string(processes), DDP_TOY_TRAINER};
  argv.insert(argv.end(), job.begin(), job.end());
  return launch::run_children({launch::ChildSpec{argv, {}, kUnsetVariables}}, kDeadline).at(0);
}

}  // namespace ddp::interop

// LauncherPython: ddprun runs a Python script as torchrun does, `python3 -u
// SCRIPT ARGS` with python3 from PATH (Note [Python scripts] in
// src/launch/launch_options.cpp). The PyTorch DDP script ddp_script.py
// trains on two ranks, and resumes from its checkpoint after a killed worker.
// The training tests need a python3 with PyTorch (Debian's python3-torch:
// 1.13 on Debian 12, 2.6 in CI's Debian 13 root) and are skipped with the
// reason where there is none; both CI legs require them, so there it is a
// failure (Note [A skip CI does not allow] in tests/common/required_suites.hpp).

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <regex>
#include <set>

#include "common/temporary_directory.hpp"
#include "common/torch_python.hpp"
#include "ddp/launch/child_process.hpp"
#include "launch/launcher_runs.hpp"

namespace ddp::launch {
namespace {

using ddp::testing::TemporaryDirectory;
using ddp::testing::torch_python_dir;

namespace fs = std::filesystem;
using namespace std::chrono_literals;

const std::string kScript = DDP_LAUNCHER_TEST_DIR "/ddp_script.py";

// ddprun running ddp_script.py with the PyTorch-enabled python3 first in PATH.
// USE_LIBUV=0: env:// makes rank 0 host a c10d TCPStore, whose libuv server
// Debian 13's PyTorch lacks (1.13 ignores the variable).
ChildResult run_script(const std::vector<std::string>& ddprun_args,
                       const std::vector<std::string>& script_args) {
  std::vector<std::string> args = ddprun_args;
  args.push_back(kScript);
  args.insert(args.end(), script_args.begin(), script_args.end());
  ChildSpec spec = ddprun(args);
  const char* path = getenv("PATH");
  spec.env["PATH"] = torch_python_dir() + ":" + (path ? path : "/usr/bin:/bin");
  spec.env["USE_LIBUV"] = "0";
  return run_children({spec}, 240s).at(0);
}

// Each rank's digest of the final parameters, by rank.
std::map<int, std::string> digests(const std::string& output) {
  std::map<int, std::string> found;
  const std::regex line(R"(rank (\d+) world 2 digest ([0-9a-f]{64}))");
  for (std::sregex_iterator it(output.begin(), output.end(), line), end; it != end; ++it) {
    found[std::stoi((*it)[1].str())] = (*it)[2].str();
  }
  return found;
}

TEST(LauncherPython, APyTorchDdpScriptTrainsOnTwoRanks) {
  SKIP_WITHOUT_TORCH();
  const TemporaryDirectory dir("ddprun-python-");
  ChildResult r =
      run_script({"--standalone", "--nproc-per-node", "2"}, {"--checkpoint", dir.file("ckpt.pt")});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto found = digests(r.output);
  ASSERT_EQ(found.size(), 2u) << r.output;
  EXPECT_EQ(found.at(0), found.at(1)) << r.output;
  EXPECT_FALSE(contains(r.output, "resumed")) << r.output;
}

TEST(LauncherPython, AKilledWorkerIsRestartedAndTheScriptResumesFromItsCheckpoint) {
  SKIP_WITHOUT_TORCH();
  const TemporaryDirectory whole("ddprun-python-");
  ChildResult uninterrupted = run_script({"--standalone", "--nproc-per-node", "2"},
                                         {"--checkpoint", whole.file("ckpt.pt")});
  ASSERT_EQ(uninterrupted.exit_code, 0) << uninterrupted.output;
  const auto expected = digests(uninterrupted.output);
  ASSERT_EQ(expected.size(), 2u) << uninterrupted.output;

  const TemporaryDirectory killed("ddprun-python-");
  ChildResult r = run_script({"--standalone", "--nproc-per-node", "2", "--max-restarts", "1"},
                             {"--checkpoint", killed.file("ckpt.pt"), "--kill-at", "2"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 1 kills itself after step 2")) << r.output;
  EXPECT_TRUE(contains(r.output, "restarting every worker (restart 1 of 1)")) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 0 resumed at step 3 (restart 1)")) << r.output;
  EXPECT_TRUE(contains(r.output, "rank 1 resumed at step 3 (restart 1)")) << r.output;
  const auto found = digests(r.output);
  ASSERT_EQ(found.size(), 2u) << r.output;
  EXPECT_EQ(found.at(0), expected.at(0)) << r.output;
  EXPECT_EQ(found.at(1), expected.at(0)) << r.output;
}

// --no-python runs the program itself: a script without the executable bit
// is then an error, as before.
TEST(LauncherPython, NoPythonRunsTheProgramItself) {
  ChildResult r = run_launcher({"--standalone", "--no-python", kScript, "--checkpoint", "x"});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_TRUE(contains(r.output, "ddp_script.py' does not exist or is not executable")) << r.output;
}

TEST(LauncherPython, AScriptWithoutPython3InPathIsAClearError) {
  ChildSpec spec = ddprun({"--standalone", kScript});
  spec.env["PATH"] = "/nonexistent";
  ChildResult r = run_children({spec}, 60s).at(0);
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_TRUE(contains(r.output,
                       "is a Python script, run as `python3 -u SCRIPT`, but there is no "
                       "python3 in PATH"))
      << r.output;
}

TEST(LauncherPython, AMissingScriptIsAClearError) {
  ChildResult r = run_launcher({"--standalone", "no-such-train.py"});
  EXPECT_EQ(r.exit_code, 3) << r.output;
  EXPECT_TRUE(contains(r.output, "the Python script 'no-such-train.py' does not exist"))
      << r.output;
}

}  // namespace
}  // namespace ddp::launch

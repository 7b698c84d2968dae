// InteropMpirun: ddp's toy trainer under the real mpirun of Open MPI
// (Debian's openmpi-bin), which only starts the processes: ddp reads its
// OMPI_COMM_WORLD_* variables and meets at MASTER_ADDR:MASTER_PORT, given
// with -x. Every job is compared with the same job under ddprun, whose final
// parameters it must match bit for bit (params-digest); without MASTER_ADDR
// ddp's clear error is shown. Skipped with the reason where mpirun is not
// installed.

#include <gtest/gtest.h>
#include <unistd.h>

#include <regex>
#include <sstream>

#include "ddp/environment.hpp"
#include "launch/child_process.hpp"

namespace ddp::interop {
namespace {

using launch::ChildResult;
using launch::ChildSpec;
using launch::runChildren;
using namespace std::chrono_literals;

constexpr auto kDeadline = 240s;

// The test's own launcher variables must not reach the jobs.
const std::vector<std::string> kUnset = {"RANK",
                                         "WORLD_SIZE",
                                         "LOCAL_RANK",
                                         "LOCAL_WORLD_SIZE",
                                         "GROUP_RANK",
                                         "MASTER_ADDR",
                                         "MASTER_PORT",
                                         "TORCHELASTIC_RESTART_COUNT",
                                         "TORCHELASTIC_USE_AGENT_STORE",
                                         "DDP_JOB_SECRET_FILE"};

bool contains(const std::string& text, const std::string& what) {
  return text.find(what) != std::string::npos;
}

std::string digestOf(const std::string& output) {
  std::smatch m;
  return std::regex_search(output, m, std::regex(R"(params-digest=([0-9a-f]{16}))")) ? m[1].str()
                                                                                     : "<none>";
}

// The mpirun on PATH, or "".
const std::string& mpirun() {
  static const std::string path = [] {
    const EnvironmentMap env = capture_environment();
    std::stringstream dirs(env.count("PATH") ? env.at("PATH") : "");
    for (std::string dir; std::getline(dirs, dir, ':');) {
      if (!dir.empty() && ::access((dir + "/mpirun").c_str(), X_OK) == 0) return dir + "/mpirun";
    }
    return std::string();
  }();
  return path;
}

#define SKIP_WITHOUT_MPIRUN()                                                                  \
  if (mpirun().empty())                                                                        \
  GTEST_SKIP() << "no mpirun on PATH; install Debian's openmpi-bin (scripts/install-deps.sh) " \
                  "to run InteropMpirun"

// One epoch of the toy trainer.
const std::vector<std::string> kJob = {"--epochs", "1", "--seed", "5"};

// mpirun -np `processes` TOY kJob, with `variables` exported (-x). As root
// (a container) Open MPI wants --allow-run-as-root; --oversubscribe lets it
// start more processes than this machine has cores.
ChildSpec underMpirun(int processes, const std::vector<std::string>& variables) {
  std::vector<std::string> argv = {mpirun(), "--oversubscribe", "-np", std::to_string(processes)};
  if (geteuid() == 0) argv.insert(argv.begin() + 1, "--allow-run-as-root");
  for (const std::string& variable : variables) argv.insert(argv.end(), {"-x", variable});
  argv.push_back(DDP_TOY_TRAINER);
  argv.insert(argv.end(), kJob.begin(), kJob.end());
  return ChildSpec{argv, {}, kUnset};
}

// The job under mpirun on a port that was free when asked; with another
// port when rank 0 found it taken meanwhile.
ChildResult onAFreePort(int processes) {
  ChildResult result;
  for (int attempt = 0; attempt < 3; ++attempt) {
    const std::string port = std::to_string(launch::findFreePort());
    result = runChildren({underMpirun(processes, {"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port})},
                         kDeadline)
                 .at(0);
    if (!contains(result.output, "already in use")) break;
  }
  return result;
}

// The same job under ddprun, `processes` workers on this machine.
ChildResult underDdprun(int processes) {
  std::vector<std::string> argv = {DDP_DDPRUN, "--standalone", "--nproc-per-node",
                                   std::to_string(processes), DDP_TOY_TRAINER};
  argv.insert(argv.end(), kJob.begin(), kJob.end());
  return runChildren({ChildSpec{argv, {}, kUnset}}, kDeadline).at(0);
}

class InteropMpirun : public ::testing::TestWithParam<int> {};

TEST_P(InteropMpirun, TrainsAsUnderDdprun) {
  SKIP_WITHOUT_MPIRUN();
  const ChildResult reference = underDdprun(GetParam());
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  ASSERT_NE(digestOf(reference.output), "<none>") << reference.output;
  const ChildResult run = onAFreePort(GetParam());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(digestOf(run.output), digestOf(reference.output)) << run.output;
}

INSTANTIATE_TEST_SUITE_P(InteropMpirun, InteropMpirun, ::testing::Values(2, 3),
                         [](const auto& info) { return "Np" + std::to_string(info.param); });

// Open MPI gives ranks but no rendezvous address: ddp says what to export.
TEST(InteropMpirunErrors, WithoutMasterAddrTheErrorSaysWhatToExport) {
  SKIP_WITHOUT_MPIRUN();
  const ChildResult run = runChildren({underMpirun(2, {})}, kDeadline).at(0);
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_TRUE(contains(run.output,
                       "MASTER_ADDR is not set, but Open MPI describes 2 processes that must "
                       "meet at rank 0. Export MASTER_ADDR (the host of rank 0) and MASTER_PORT "
                       "(a free port), e.g. `mpirun -x MASTER_ADDR=node0 -x MASTER_PORT=29500"))
      << run.output;
  EXPECT_EQ(digestOf(run.output), "<none>") << run.output;
}

}  // namespace
}  // namespace ddp::interop

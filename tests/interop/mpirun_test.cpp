// InteropMpirun: ddp's toy trainer under the real mpirun of Open MPI
// (Debian's openmpi-bin), which only starts the processes: ddp reads its
// OMPI_COMM_WORLD_* variables and meets at MASTER_ADDR:MASTER_PORT, given
// with -x. Every job is compared with the same job under ddprun, whose final
// parameters it must match bit for bit (params-digest); without MASTER_ADDR
// ddp's clear error is shown. Skipped with the reason where mpirun is not
// installed; a failure instead where CI requires the suite (Note [A skip CI
// does not allow] in tests/common/required_suites.hpp).

#include <gtest/gtest.h>
#include <unistd.h>

#include <regex>
#include <sstream>

#include "common/required_suites.hpp"
#include "ddp/comm/environment.hpp"
#include "ddp/launch/child_process.hpp"
#include "ddp/launch/port_reservation.hpp"
#include "interop/interop_job.hpp"

namespace ddp::interop {
namespace {

using launch::ChildResult;
using launch::ChildSpec;
using launch::run_children;
using namespace std::chrono_literals;

// The mpirun on PATH, or "".
const std::string& mpirun() {
  static const std::string path = on_path("mpirun");
  return path;
}

#define SKIP_WITHOUT_MPIRUN()                            \
  if (mpirun().empty())                                  \
  DDP_SKIP_UNLESS_REQUIRED(                              \
      "no mpirun on PATH; install Debian's openmpi-bin " \
      "(scripts/install-deps.sh) to run InteropMpirun")

// mpirun -np `processes` TOY kJob, with `variables` exported (-x). As root
// (a container) Open MPI wants --allow-run-as-root; --oversubscribe lets it
// start more processes than this machine has cores.
ChildSpec under_mpirun(int processes, const std::vector<std::string>& variables) {
  std::vector<std::string> argv = {mpirun(), "--oversubscribe", "-np", std::to_string(processes)};
  if (geteuid() == 0) argv.insert(argv.begin() + 1, "--allow-run-as-root");
  for (const std::string& variable : variables) argv.insert(argv.end(), {"-x", variable});
  argv.push_back(DDP_TOY_TRAINER);
  argv.insert(argv.end(), kJob.begin(), kJob.end());
  return ChildSpec{argv, {}, kUnsetVariables};
}

// The job under mpirun, rank 0's port held by this test until the job ends
// (Note [A port held from choice to use]).
ChildResult on_a_reserved_port(int processes) {
  const launch::PortReservation reserved;
  const std::string port = std::to_string(reserved.port());
  return run_children({under_mpirun(processes, {"MASTER_ADDR=127.0.0.1", "MASTER_PORT=" + port})},
                      kDeadline)
      .at(0);
}

class InteropMpirun : public ::testing::TestWithParam<int> {};

TEST_P(InteropMpirun, TrainsAsUnderDdprun) {
  SKIP_WITHOUT_MPIRUN();
  const ChildResult reference = under_ddprun(GetParam(), kJob);
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  ASSERT_NE(digest_of(reference.output), "<none>") << reference.output;
  const ChildResult run = on_a_reserved_port(GetParam());
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(digest_of(run.output), digest_of(reference.output)) << run.output;
}

INSTANTIATE_TEST_SUITE_P(InteropMpirun, InteropMpirun, ::testing::Values(2, 3),
                         [](const auto& info) { return "Np" + std::to_string(info.param); });

// Open MPI gives ranks but no rendezvous address: ddp says what to export.
TEST(InteropMpirunErrors, WithoutMasterAddrTheErrorSaysWhatToExport) {
  SKIP_WITHOUT_MPIRUN();
  const ChildResult run = run_children({under_mpirun(2, {})}, kDeadline).at(0);
  EXPECT_NE(run.exit_code, 0) << run.output;
  EXPECT_TRUE(contains(run.output,
                       "MASTER_ADDR is not set, but Open MPI describes 2 processes that must "
                       "meet at rank 0. Export MASTER_ADDR (the host of rank 0) and MASTER_PORT "
                       "(a free port), e.g. `mpirun -x MASTER_ADDR=node0 -x MASTER_PORT=29500"))
      << run.output;
  EXPECT_EQ(digest_of(run.output), "<none>") << run.output;
}

}  // namespace
}  // namespace ddp::interop

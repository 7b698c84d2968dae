// InteropSlurm: ddp's toy trainer under the real Slurm (Debian's slurm-wlm
// and munge), on the one-node cluster ctest starts for this suite with
// slurm_cluster.sh and stops after it, whatever happened to the tests
// (Note [One Slurm cluster per suite, stopped whatever happens] in
// tests/interop/CMakeLists.txt). Slurm only starts the
// processes: ddp reads SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and
// SLURM_TASKS_PER_NODE, and meets at the first host of SLURM_STEP_NODELIST
// on MASTER_PORT, which the user exports (here a free port), as a real job
// script would. `srun -n 2` and an `sbatch` script whose srun starts 2 tasks
// are each compared with the same job under ddprun, whose final parameters
// they must match bit for bit (params-digest). Skipped with the reason where
// the cluster cannot start (not root, or slurm-wlm/munge not installed: the
// fixture writes it to cannot-start in the cluster's folder); a
// failure instead where CI requires the suite (Note [A skip CI does not
// allow] in tests/common/required_suites.hpp).

#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <sstream>

#include "common/file_text.hpp"
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
using ddp::testing::read_file;

// " word word ...".
std::string joined(const std::vector<std::string>& words) {
  std::string line;
  for (const std::string& word : words) line += " " + word;
  return line;
}

// A job's time limit, in minutes: a job this test leaves behind ends anyway.
const std::string kTimeLimitMinutes = "5";

// The suite's cluster, which ctest's fixture started: in
// DDP_SLURM_CLUSTER_DIR when set (a test that runs ctest itself sets it),
// else where CMake put it.
class InteropSlurm : public ::testing::Test {
 protected:
  static std::filesystem::path cluster_dir() {
    const char* chosen = std::getenv("DDP_SLURM_CLUSTER_DIR");
    return chosen != nullptr && *chosen != '\0' ? chosen : DDP_SLURM_DIR;
  }

  void SetUp() override {
    dir_ = cluster_dir();
    if (std::filesystem::exists(dir_ / "cannot-start")) {
      DDP_SKIP_UNLESS_REQUIRED("no Slurm cluster can start here: " +
                               read_file((dir_ / "cannot-start").string()));
    }
    ASSERT_TRUE(std::filesystem::exists(dir_ / "slurm.conf") &&
                std::filesystem::exists(dir_ / "slurmctld.pid"))
        << "no Slurm cluster in " << dir_
        << ": ctest starts it before these tests (InteropSlurmCluster.Start); run them "
           "with ctest -R InteropSlurm, not the binary alone";
  }

  // A Slurm client command run against this suite's cluster, with
  // `variables` exported.
  static ChildSpec client(std::vector<std::string> argv,
                          std::map<std::string, std::string> variables = {}) {
    variables["SLURM_CONF"] = (dir_ / "slurm.conf").string();
    return ChildSpec{std::move(argv), std::move(variables), kUnsetVariables};
  }

  // `run(port)` on a port this test holds until it returns.
  template <typename Run>
  static ChildResult on_a_reserved_port(Run run) {
    const launch::PortReservation reserved;
    return run(std::to_string(reserved.port()));
  }

  static inline std::filesystem::path dir_;
};

TEST_F(InteropSlurm, SrunTrainsAsUnderDdprun) {
  const ChildResult reference = under_ddprun(2, kJob);
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  ASSERT_NE(digest_of(reference.output), "<none>") << reference.output;
  const ChildResult run = on_a_reserved_port([](const std::string& port) {
    std::vector<std::string> argv = {on_path("srun"), "-n", "2", "--time", kTimeLimitMinutes};
    // slurm_leftovers_check.sh kills this test while its job runs: it asks
    // the job's tasks to wait first, so that a job of a second is not over
    // before its poll of squeue sees it running.
    if (const char* hold = std::getenv("DDP_SLURM_HOLD_SECONDS"))
      argv.insert(argv.end(), {"/bin/sh", "-c", "sleep \"$0\" && exec \"$@\"", hold});
    argv.push_back(DDP_TOY_TRAINER);
    argv.insert(argv.end(), kJob.begin(), kJob.end());
    return run_children({client(argv, {{"MASTER_PORT", port}})}, kDeadline).at(0);
  });
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(digest_of(run.output), digest_of(reference.output)) << run.output;
}

// A batch script as a user writes one: it asks for 2 tasks, exports
// MASTER_PORT and starts the trainer with srun; sbatch --wait returns when
// the job ends, with its exit status.
TEST_F(InteropSlurm, SbatchScriptTrainsAsUnderDdprun) {
  const ChildResult reference = under_ddprun(2, kJob);
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  ASSERT_NE(digest_of(reference.output), "<none>") << reference.output;
  int attempt = 0;
  std::string job_output;
  const ChildResult run = on_a_reserved_port([&](const std::string& port) {
    const std::filesystem::path script = dir_ / ("job-" + std::to_string(attempt) + ".sh");
    const std::filesystem::path output = dir_ / ("job-" + std::to_string(attempt) + ".out");
    ++attempt;
    std::ofstream(script) << "#!/bin/bash\n"
                          << "#SBATCH --ntasks=2\n"
                          << "#SBATCH --time=" << kTimeLimitMinutes << "\n"
                          << "export MASTER_PORT=" << port << "\n"
                          << "srun " << DDP_TOY_TRAINER << joined(kJob) << "\n";
    ChildResult result =
        run_children({client({on_path("sbatch"), "--wait", "--output", output.string(), "--chdir",
                              dir_.string(), script.string()})},
                     kDeadline)
            .at(0);
    job_output = read_file(output);
    result.output += "\n--- " + output.string() + "\n" + job_output;
    return result;
  });
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(digest_of(job_output), digest_of(reference.output)) << run.output;
}

}  // namespace
}  // namespace ddp::interop

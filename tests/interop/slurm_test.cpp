// InteropSlurm: ddp's toy trainer under the real Slurm (Debian's slurm-wlm
// and munge), on a one-node cluster that slurm_cluster.sh starts in a
// temporary folder for this suite and stops after it. Slurm only starts the
// processes: ddp reads SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID and
// SLURM_TASKS_PER_NODE, and meets at the first host of SLURM_STEP_NODELIST
// on MASTER_PORT, which the user exports (here a free port), as a real job
// script would. `srun -n 2` and an `sbatch` script whose srun starts 2 tasks
// are each compared with the same job under ddprun, whose final parameters
// they must match bit for bit (params-digest). Skipped with the reason where
// the cluster cannot start (not root, or slurm-wlm/munge not installed); a
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

#include "ddp/comm/environment.hpp"
#include "interop/interop_job.hpp"
#include "ddp/launch/child_process.hpp"
#include "ddp/launch/port_reservation.hpp"
#include "common/file_text.hpp"
#include "common/required_suites.hpp"

namespace ddp::interop {
namespace {

using launch::ChildResult;
using launch::ChildSpec;
using launch::run_children;
using namespace std::chrono_literals;

// Starting takes a second; each of the script's waits has its own 60 s
// deadline, and stopping waits for the jobs, then for each daemon.
constexpr auto kClusterDeadline = 300s;

using ddp::testing::read_file;

// " word word ...".
std::string joined(const std::vector<std::string>& words) {
  std::string line;
  for (const std::string& word : words) line += " " + word;
  return line;
}

// A job's time limit, in minutes: a job this test leaves behind ends anyway.
const std::string kTimeLimitMinutes = "5";

// The suite's cluster: started once before its first test, stopped after
// its last, whatever the tests did.
class InteropSlurm : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    char folder[] = "/tmp/ddp-slurm-XXXXXX";
    if (::mkdtemp(folder) == nullptr) {
      failure_ = "cannot create a folder for the cluster under /tmp";
      return;
    }
    dir_ = folder;
    // slurmctld's and slurmd's ports stay held for as long as the suite runs
    // (Note [A port held from choice to use]).
    ports_.resize(2);
    const ChildResult start = cluster({"start", dir_.string(), std::to_string(ports_[0].port()),
                                       std::to_string(ports_[1].port())});
    if (start.exit_code == 0) return;
    if (start.exit_code == 2) {
      skip_ = start.output;
      return;
    }
    failure_ = "slurm_cluster.sh start: " + start.status() + "\n" + start.output;
  }

  static void TearDownTestSuite() { stop_cluster(); }

  // Stops the cluster in dir_ and, once nothing runs there, removes it.
  static void stop_cluster() {
    if (dir_.empty()) return;
    const ChildResult stop = cluster({"stop", dir_.string()});
    EXPECT_EQ(stop.exit_code, 0) << "slurm_cluster.sh stop: " << stop.status() << "\n"
                                 << stop.output;
    std::error_code ignored;
    if (stop.exit_code == 0) std::filesystem::remove_all(dir_, ignored);
    dir_.clear();
    ports_.clear();
  }

  void SetUp() override {
    if (!skip_.empty()) DDP_SKIP_UNLESS_REQUIRED("no Slurm cluster can start here: " + skip_);
    ASSERT_TRUE(failure_.empty()) << failure_;
  }

  static ChildResult cluster(const std::vector<std::string>& arguments) {
    std::vector<std::string> argv = {"/bin/bash", DDP_SLURM_CLUSTER};
    argv.insert(argv.end(), arguments.begin(), arguments.end());
    return run_children({ChildSpec{argv, {}, kUnsetVariables}}, kClusterDeadline).at(0);
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

  static inline std::vector<launch::PortReservation> ports_;
  static inline std::filesystem::path dir_;
  static inline std::string skip_;
  static inline std::string failure_;
};

TEST_F(InteropSlurm, SrunTrainsAsUnderDdprun) {
  const ChildResult reference = under_ddprun(2, kJob);
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  ASSERT_NE(digest_of(reference.output), "<none>") << reference.output;
  const ChildResult run = on_a_reserved_port([](const std::string& port) {
    std::vector<std::string> argv = {on_path("srun"),   "-n",           "2", "--time",
                                     kTimeLimitMinutes, DDP_TOY_TRAINER};
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

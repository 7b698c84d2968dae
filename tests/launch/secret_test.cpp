// The job's secret end to end: ddprun makes one per single-node job and its
// workers' store refuses everyone else; several nodes share a --secret-file;
// workers started the torchrun way, without a secret, still run and warn.

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include "common/temporary_directory.hpp"
#include "ddp/launch/child_process.hpp"
#include "ddp/launch/port_reservation.hpp"
#include "launch/launcher_runs.hpp"

namespace ddp::launch {
namespace {

using namespace std::chrono_literals;

std::string secret_file(const std::filesystem::path& dir, const std::string& name,
                        const std::string& content) {
  std::filesystem::create_directories(dir);
  const std::string path = (dir / name).string();
  std::ofstream(path) << content << "\n";
  ::chmod(path.c_str(), 0600);
  return path;
}

TEST(LauncherSecret, OneNodeJobHasItsOwnSecretAndItsStoreRefusesIntruders) {
  auto r = run_launcher({"--standalone", "--nproc-per-node", "2", DDP_LAUNCH_WORKER, "intrude"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[1] intruder without a secret: refused"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[1] intruder with a wrong secret: refused"), std::string::npos)
      << r.output;
  // Rank 0 hosts the store and logs the wrong proof (the client without a
  // secret gave up after HELLO, sending nothing); the job goes on.
  EXPECT_EQ(count(r.output, "[0] ddp: the rendezvous store on port"), 1) << r.output;
  EXPECT_NE(r.output.find("wrong proof of the job secret"), std::string::npos) << r.output;
  EXPECT_EQ(count(r.output, "attempt 0: sum of ranks 1"), 2) << r.output;
  EXPECT_EQ(r.output.find("has no job secret"), std::string::npos) << r.output;
  // Both ranks read one private file, which is gone with the job.
  std::smatch file;
  ASSERT_TRUE(std::regex_search(r.output, file, std::regex(R"(\[0\] secret file (\S+) mode 600)")))
      << r.output;
  EXPECT_NE(r.output.find("[1] secret file " + file[1].str() + " mode 600"), std::string::npos);
  EXPECT_FALSE(std::filesystem::exists(file[1].str()));
}

TEST(LauncherSecret, NodesMeetWithTheSameSecretFileAndAWrongOneIsRefused) {
  const ddp::testing::TemporaryDirectory secrets("ddprun-secrets-");
  const std::filesystem::path& dir = secrets.path();
  const std::string good = secret_file(dir, "job.secret", "a secret both nodes were given");
  const std::string bad = secret_file(dir, "other.secret", "a secret of some other job");
  auto nodes = [&](const std::string& second_secret, const std::string& timeout) {
    const PortReservation reserved;
    const std::string port = std::to_string(reserved.port());
    auto node = [&](int rank, const std::string& secret) {
      return ddprun({"--nnodes", "2", "--node-rank", std::to_string(rank), "--master-addr",
                     "127.0.0.1", "--master-port", port, "--nproc-per-node", "1",
                     "--rendezvous-timeout", timeout, "--secret-file", secret, DDP_LAUNCH_WORKER,
                     "env"});
    };
    return run_children({node(0, good), node(1, second_secret)}, 90s);
  };
  auto met = nodes(good, "20");
  for (int n : {0, 1}) {
    EXPECT_EQ(met[n].exit_code, 0) << met[0].output << met[1].output;
    EXPECT_NE(met[n].output.find("attempt 0: sum of ranks 1"), std::string::npos) << met[n].output;
    EXPECT_EQ(met[n].output.find("warning"), std::string::npos) << met[n].output;
  }
  auto refused = nodes(bad, "4");
  EXPECT_EQ(refused[1].exit_code, 4) << refused[1].output;  // RendezvousError
  EXPECT_NE(refused[1].output.find("refused this process's job secret"), std::string::npos)
      << refused[1].output;
  EXPECT_NE(refused[0].output.find("refused a client from 127.0.0.1"), std::string::npos)
      << refused[0].output;
  EXPECT_NE(refused[0].exit_code, 0) << "node 0 should time out waiting for its second node";

  ::chmod(good.c_str(), 0644);
  auto unsafe = run_launcher({"--secret-file", good, DDP_LAUNCH_WORKER, "env"}, 30s);
  EXPECT_EQ(unsafe.exit_code, 3) << unsafe.output;  // ConfigError
  EXPECT_NE(unsafe.output.find("has mode 0644"), std::string::npos) << unsafe.output;
}

TEST(LauncherSecret, TorchrunStyleWorkersWithoutASecretWarnAndStillRun) {
  const PortReservation reserved;
  const std::string port = std::to_string(reserved.port());
  auto worker = [&](int rank) {
    return ChildSpec{{DDP_LAUNCH_WORKER, "env"},
                     {{"RANK", std::to_string(rank)},
                      {"WORLD_SIZE", "2"},
                      {"LOCAL_RANK", std::to_string(rank)},
                      {"MASTER_ADDR", "127.0.0.1"},
                      {"MASTER_PORT", port},
                      {"TORCHELASTIC_RESTART_COUNT", "0"}},
                     {"DDP_JOB_SECRET_FILE"}};
  };
  auto results = run_children({worker(0), worker(1)}, 60s);
  for (int rank : {0, 1}) {
    EXPECT_EQ(results[rank].exit_code, 0) << results[rank].output;
    EXPECT_NE(results[rank].output.find("attempt 0: sum of ranks 1"), std::string::npos);
  }
  EXPECT_NE(results[0].output.find("has no job secret, so any process on this machine can read "
                                   "and change the job's keys"),
            std::string::npos)
      << results[0].output;
  EXPECT_EQ(results[1].output.find("has no job secret"), std::string::npos);
}

}  // namespace
}  // namespace ddp::launch

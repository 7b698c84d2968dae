// ddprun end to end: the real launcher starting real workers
// (tests/launch/launch_worker.cpp), with deadlines on every wait.

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <regex>
#include <thread>

#include "common/file_text.hpp"
#include "common/port_holder.hpp"
#include "common/required_suites.hpp"
#include "common/temporary_directory.hpp"
#include "ddp/base/allocator.hpp"
#include "ddp/base/blas.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/launch/child_process.hpp"
#include "ddp/launch/port_reservation.hpp"
#include "launch/launcher_runs.hpp"

namespace ddp::launch {
namespace {

using ddp::testing::PortHolder;

using namespace std::chrono_literals;

TEST(LauncherRun, WorkerEnvironmentMatchesTorchrunAndOutputIsPrefixed) {
  auto r = run_launcher(
      {"--standalone", "--nproc-per-node", "2", "--run-id", "envtest", DDP_LAUNCH_WORKER, "env"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int rank : {0, 1}) {
    const std::string p = "[" + std::to_string(rank) + "] ";
    for (const std::string& line :
         {"RANK=" + std::to_string(rank), "LOCAL_RANK=" + std::to_string(rank),
          std::string("GROUP_RANK=0"), std::string("LOCAL_WORLD_SIZE=2"),
          std::string("WORLD_SIZE=2"), std::string("MASTER_ADDR=127.0.0.1"),
          std::string("TORCHELASTIC_RESTART_COUNT=0"), std::string("TORCHELASTIC_MAX_RESTARTS=0"),
          std::string("TORCHELASTIC_RUN_ID=envtest"), std::string("OMP_NUM_THREADS="),
          std::string("attempt 0: sum of ranks 1"),
          std::string("a line without a newline at exit")}) {
      EXPECT_NE(r.output.find(p + line), std::string::npos) << "missing '" << p + line << "' in\n"
                                                            << r.output;
    }
  }
  // Every line of worker output carries a rank prefix: none was split.
  std::istringstream lines(r.output);
  for (std::string line; std::getline(lines, line);) {
    EXPECT_TRUE(std::regex_match(line, std::regex(R"(\[[01]\] .*)")) ||
                line.rfind("ddprun: ", 0) == 0)
        << "unprefixed line: '" << line << "'";
  }
  EXPECT_NE(r.output.find("TORCHELASTIC_ERROR_FILE=/"), std::string::npos);
}

// Note [Intra-op threads per worker] (src/launch/worker_environment.cpp)
// and Note [The BLAS in use] (ddp/base/blas.hpp): each worker gets its
// share of the cores for OpenMP and OpenBLAS alike, and ddprun names the
// BLAS once for the job (its workers are told it did).
TEST(LauncherRun, WorkersShareTheCoresAndTheBlasIsNamedOnce) {
  auto r = run_launcher({"--standalone", "--nproc-per-node", "2", DDP_LAUNCH_WORKER, "env"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  const std::string share = std::to_string(std::max(1u, cores / 2));
  for (const std::string& line :
       {"[0] OMP_NUM_THREADS=" + share, "[1] OPENBLAS_NUM_THREADS=" + share,
        std::string("[0] DDP_BLAS_REPORTED=1"), std::string("[1] DDP_BLAS_REPORTED=1")})
    EXPECT_NE(r.output.find(line + "\n"), std::string::npos) << "missing '" << line << "' in\n"
                                                             << r.output;
  const ddp::BlasLibrary blas = ddp::blas_in_use();
  const std::string named = "ddprun: " + blas.summary() + "\n";
  const auto first = r.output.find(named);
  EXPECT_NE(first, std::string::npos) << "no '" << named << "' in\n" << r.output;
  EXPECT_EQ(r.output.find("BLAS: ", first + named.size()), std::string::npos)
      << "the BLAS named twice:\n"
      << r.output;

  // A user's OMP_NUM_THREADS is kept, and OpenBLAS follows it.
  ddp::launch::ChildSpec spec =
      ddp::launch::ddprun({"--standalone", "--nproc-per-node", "2", DDP_LAUNCH_WORKER, "env"});
  spec.env["OMP_NUM_THREADS"] = "3";
  auto chosen = ddp::launch::run_children({spec}, std::chrono::seconds(90)).at(0);
  ASSERT_EQ(chosen.exit_code, 0) << chosen.output;
  EXPECT_NE(chosen.output.find("[1] OMP_NUM_THREADS=3\n"), std::string::npos) << chosen.output;
  EXPECT_NE(chosen.output.find("[1] OPENBLAS_NUM_THREADS=3\n"), std::string::npos) << chosen.output;
}

// Note [The host allocator] (ddp/base/allocator.hpp): ddprun preloads
// tcmalloc into every worker where it is installed, and each worker's
// allocator_in_use() says it runs on it; --allocator glibc and a library's
// path are what the workers get, and a user's LD_PRELOAD is left alone.
TEST(LauncherAllocator, WorkersAllocateWithTheAllocatorDdprunNames) {
  const std::string tcmalloc = "/usr/lib/x86_64-linux-gnu/libtcmalloc_minimal.so.4";
  const std::string jemalloc = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2";
  if (!std::filesystem::exists(tcmalloc) || !std::filesystem::exists(jemalloc))
    DDP_SKIP_UNLESS_REQUIRED("no " + tcmalloc + " or " + jemalloc +
                             " (Debian's libtcmalloc-minimal4 and libjemalloc2, x86-64)");
  const std::string real = std::filesystem::canonical(tcmalloc).string();
  auto run = [](std::vector<std::string> args, const std::string& preload = "") {
    args.insert(args.begin(), {"--standalone", "--nproc-per-node", "2"});
    args.insert(args.end(), {DDP_LAUNCH_WORKER, "env"});
    ddp::launch::ChildSpec spec = ddp::launch::ddprun(args);
    if (preload.empty()) {
      spec.unset_env.push_back("LD_PRELOAD");
    } else {
      spec.env["LD_PRELOAD"] = preload;
    }
    return ddp::launch::run_children({spec}, std::chrono::seconds(90)).at(0);
  };
  auto expect_lines = [](const ChildResult& r, const std::vector<std::string>& lines) {
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (const std::string& line : lines)
      EXPECT_NE(r.output.find(line + "\n"), std::string::npos) << "missing '" << line << "' in\n"
                                                               << r.output;
  };
  expect_lines(run({}), {"ddprun: allocator: tcmalloc " + real + ", preloaded into the workers",
                         "[0] LD_PRELOAD=" + tcmalloc, "[1] LD_PRELOAD=" + tcmalloc});
  const ChildResult preloaded = run({});
  for (const char* rank : {"[0] ", "[1] "}) {
    const std::string line = std::string(rank) + "allocator: tcmalloc (gperftools 2.";
    const auto begin = preloaded.output.find(line);
    ASSERT_NE(begin, std::string::npos) << "missing '" << line << "' in\n" << preloaded.output;
    const std::string rest =
        preloaded.output.substr(begin, preloaded.output.find('\n', begin) - begin);
    EXPECT_EQ(rest.substr(rest.size() - real.size() - 2), ") " + real) << rest;
  }
  const ddp::HostAllocator own = ddp::allocator_in_use();  // this test's: glibc
  expect_lines(run({"--allocator", "glibc"}),
               {"ddprun: allocator: glibc's malloc (--allocator glibc)", "[1] LD_PRELOAD=<unset>",
                "[1] " + own.summary()});
  const std::string jemalloc_real = std::filesystem::canonical(jemalloc).string();
  const ChildResult chosen = run({"--allocator", jemalloc});
  expect_lines(chosen, {"[1] LD_PRELOAD=" + jemalloc});
  EXPECT_NE(chosen.output.find("[1] allocator: jemalloc (5."), std::string::npos) << chosen.output;
  const ChildResult users = run({}, jemalloc);
  expect_lines(users, {"ddprun: allocator: as LD_PRELOAD=" + jemalloc + " gives it",
                       "[0] LD_PRELOAD=" + jemalloc});
  EXPECT_NE(users.output.find("[0] allocator: jemalloc (5."), std::string::npos) << users.output;

  const ChildResult wrong = run({"--allocator", "jemalloc"});
  EXPECT_EQ(wrong.exit_code, static_cast<int>(ddp::ExitCode::kConfig)) << wrong.output;
  EXPECT_NE(wrong.output.find("ddprun: error: --allocator is 'jemalloc'; give auto"),
            std::string::npos)
      << wrong.output;
}

// The reference BLAS, put in front through the library path as a user's
// machine without OpenBLAS has it: ddprun names it and the fix.
TEST(LauncherRun, TheReferenceBlasIsAWarningNamingTheFix) {
  const std::string reference_dir = "/usr/lib/x86_64-linux-gnu/blas";
  if (!std::filesystem::exists(reference_dir + "/libblas.so.3"))
    GTEST_SKIP() << "no reference BLAS at " << reference_dir << " (Debian's libblas3, x86-64)";
  ddp::launch::ChildSpec spec =
      ddp::launch::ddprun({"--standalone", "--nproc-per-node", "1", DDP_LAUNCH_WORKER, "env"});
  spec.env["LD_LIBRARY_PATH"] = reference_dir;
  auto r = ddp::launch::run_children({spec}, std::chrono::seconds(90)).at(0);
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("ddprun: BLAS: netlib reference BLAS " + reference_dir + "/libblas.so.3"),
            std::string::npos)
      << r.output;
  EXPECT_NE(
      r.output.find("ddprun: warning: LibTorch's matrix products run on the reference BLAS (" +
                    reference_dir + "/libblas.so.3"),
      std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("apt-get install libopenblas0-openmp"), std::string::npos) << r.output;
}

using ddp::testing::read_file;

TEST(LauncherRun, RedirectsKeepEachRanksStreamsAndTeeShowsThemToo) {
  for (bool tee : {false, true}) {
    const ddp::testing::TemporaryDirectory logs("ddprun-logs-");
    const std::string dir = logs.string();
    std::vector<std::string> args = {"--standalone",
                                     "--nproc-per-node",
                                     "2",
                                     "--run-id",
                                     "logs",
                                     "--log-dir",
                                     dir,
                                     "--redirects",
                                     "3"};
    if (tee) args.insert(args.end(), {"--tee", "3"});
    args.insert(args.end(), {DDP_LAUNCH_WORKER, "env"});
    auto r = run_launcher(args);
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (int rank : {0, 1}) {
      const std::string base = dir + "/logs/attempt_0/" + std::to_string(rank) + "/";
      EXPECT_NE(read_file(base + "stdout.log").find("RANK=" + std::to_string(rank) + "\n"),
                std::string::npos)
          << base;
      EXPECT_TRUE(std::filesystem::exists(base + "stderr.log")) << base;
    }
    EXPECT_EQ(r.output.find("[0] RANK=0") != std::string::npos, tee) << r.output;
  }
}

TEST(LauncherRestarts, FailingRankExhaustsRestartsAndIsNamed) {
  auto r = run_launcher({"--standalone", "--nproc-per-node", "2", "--max-restarts", "2",
                         "--monitor-interval", "0.1", "--stop-grace", "2", DDP_LAUNCH_WORKER,
                         "fail", "1"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(count(r.output, "failing on purpose"), 3) << r.output;  // first start + 2 restarts
  EXPECT_NE(r.output.find("(restart 1 of 2)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("(restart 2 of 2)"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("restart 3"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("job failed after 2 restart(s) (--max-restarts 2). First failure: rank 1 "
                          "(node 0, local rank 1, pid "),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("ended with exit 3: rank 1 failed on purpose at attempt 2"),
            std::string::npos)
      << r.output;
}

// Issue 71, point 1: a snapshot that cannot be written fails again in a
// restart, so ddprun ends the job at once with its restarts unused, naming
// the failure and the fix, rather than restarting until they run out.
// The writes fail with EIO from their first byte (the preloaded
// common/failing_writes.cpp, armed by the file .fail-writes).
TEST(LauncherRestarts, SnapshotErrorEndsTheJobWithoutARestartLoop) {
  const ddp::testing::TemporaryDirectory snapshots("ddprun-eio-");
  const std::string dir = snapshots.string();
  std::ofstream(dir + "/.fail-writes") << "armed";
  ChildSpec spec =
      ddprun({"--standalone", "--nproc-per-node", "2", "--max-restarts", "3", "--monitor-interval",
              "0.1", "--stop-grace", "2", DDP_LAUNCH_WORKER, "snapshot-fails", "0", dir});
  spec.env = {{"LD_PRELOAD", DDP_TEST_FAILING_WRITES},
              {"DDP_TEST_FAIL_WRITES_UNDER", dir},
              {"DDP_TEST_FAIL_WRITES_AT", "0"}};
  const ChildResult r = run_children({spec}, std::chrono::seconds(90)).at(0);
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_EQ(count(r.output, "attempt 0: saving"), 2) << r.output;
  EXPECT_EQ(r.output.find("attempt 1"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("restart 1"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("ended with exit 9: "), std::string::npos) << r.output;
  EXPECT_NE(r.output.find(dir), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("; not restarting (a snapshot that cannot be written or read fails "
                          "again in a restart; free the disk or fix the file, then start the "
                          "job again"),
            std::string::npos)
      << r.output;
}

// Point 7 of issue 16: no decorator needed. The exception escapes main(),
// ddp::init()'s terminate handler records it in torchrun's schema, and the
// summary names it.
TEST(LauncherRestarts, UncaughtExceptionIsRecordedInTorchrunsSchemaWithoutADecorator) {
  const ddp::testing::TemporaryDirectory logs("ddprun-uncaught-");
  const std::string dir = logs.string();
  auto r = run_launcher(
      {"--standalone", "--run-id", "uncaught", "--log-dir", dir, DDP_LAUNCH_WORKER, "uncaught"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_NE(r.output.find("ended with signal 6 (Aborted): rank 0 gave up waiting, on purpose"),
            std::string::npos)
      << r.output;
  std::ifstream file(dir + "/uncaught/attempt_0/0/error.json");
  const nlohmann::json record = nlohmann::json::parse(file, nullptr, false);
  ASSERT_TRUE(record.is_object()) << "no error file";
  const auto& message = record["message"];
  EXPECT_EQ(message["message"], "rank 0 gave up waiting, on purpose");
  EXPECT_EQ(message["errorCode"], static_cast<int>(ExitCode::kTimeout));
  // torchrun reads extraInfo.timestamp as an integer in a string.
  const std::string stamp = message["extraInfo"]["timestamp"].get<std::string>();
  EXPECT_NEAR(std::stod(stamp), static_cast<double>(std::time(nullptr)), 120.0) << stamp;
}

TEST(LauncherRestarts, StoppedWorkerIsRestartedAfterCollectiveTimeout) {
  const auto start = std::chrono::steady_clock::now();
  auto r = run_launcher({"--standalone", "--nproc-per-node", "2", "--max-restarts", "1",
                         "--monitor-interval", "0.1", "--stop-grace", "2", DDP_LAUNCH_WORKER,
                         "stop-once", "1"});
  const double seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("[1] stopping myself"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("did not finish within 1500 ms"), std::string::npos) << r.output;
  // Rank 1 stopped before its first collective; its ring's file says so.
  EXPECT_NE(r.output.find("ddprun: flight recorder: rank 1 issued no collective while rank 0 "
                          "waited in collective #1 all_reduce(sum) of 1 int64 (8 B) (timed out "
                          "after 1."),
            std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("(restart 1 of 1)"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("[0] attempt 1: sum of ranks 1"), std::string::npos) << r.output;
  EXPECT_LT(seconds, 60);
}

TEST(LauncherSignals, SigtermStopsEveryWorkerWithinTheGrace) {
  ChildProcess launcher(ddprun({"--standalone", "--nproc-per-node", "2", "--stop-grace", "2",
                                DDP_LAUNCH_WORKER, "sleep"}),
                        false);
  std::string output;
  std::vector<pid_t> pids;
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  while (pids.size() < 2 && std::chrono::steady_clock::now() < deadline) {
    wait_for_output({&launcher}, 100ms);
    launcher.pump([&](Stream, std::string_view chunk) { output.append(chunk); });
    pids.clear();
    std::smatch m;
    for (auto it = output.cbegin();
         std::regex_search(it, output.cend(), m, std::regex(R"(\] pid (\d+))")); it = m[0].second) {
      pids.push_back(std::stoi(m[1]));
    }
  }
  ASSERT_EQ(pids.size(), 2u) << output;
  for (pid_t pid : pids) ASSERT_EQ(kill(pid, 0), 0) << "worker " << pid << " not running";
  const auto sent = std::chrono::steady_clock::now();
  kill(launcher.pid(), SIGTERM);
  while (!launcher.reap() && std::chrono::steady_clock::now() < sent + 10s) {
    std::this_thread::sleep_for(20ms);
  }
  ASSERT_TRUE(launcher.exited()) << "ddprun did not exit after SIGTERM";
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - sent).count(), 3.5);
  EXPECT_EQ(launcher.exit_code(), 128 + SIGTERM);
  for (pid_t pid : pids) {
    EXPECT_EQ(kill(pid, 0), -1) << "worker " << pid << " outlived the launcher";
  }
}

TEST(LauncherInput, BadInputIsAClearErrorAndNonZeroExit) {
  auto unknown = run_launcher({"--no-such-option", "1", DDP_LAUNCH_WORKER, "env"}, 30s);
  EXPECT_NE(unknown.exit_code, 0);
  EXPECT_NE(unknown.output.find("--no-such-option"), std::string::npos) << unknown.output;

  auto zero = run_launcher({"--nproc-per-node", "0", DDP_LAUNCH_WORKER, "env"}, 30s);
  EXPECT_EQ(zero.exit_code, static_cast<int>(ExitCode::kConfig)) << zero.output;
  EXPECT_NE(zero.output.find("--nproc-per-node is 0; it must be at least 1"), std::string::npos)
      << zero.output;

  auto missing = run_launcher({"--standalone", "/no/such/trainer"}, 30s);
  EXPECT_EQ(missing.exit_code, static_cast<int>(ExitCode::kConfig)) << missing.output;
  EXPECT_NE(missing.output.find("the program '/no/such/trainer' does not exist"), std::string::npos)
      << missing.output;

  PortHolder holder;
  const std::string port = std::to_string(holder.port());
  auto taken = run_launcher({"--master-port", port, DDP_LAUNCH_WORKER, "env"}, 30s);
  EXPECT_EQ(taken.exit_code, static_cast<int>(ExitCode::kRendezvous)) << taken.output;
  EXPECT_NE(taken.output.find("127.0.0.1:" + port + " for the job: the port is already in use"),
            std::string::npos)
      << taken.output;

  // A --log-dir under a regular file cannot be created: an IoError, exit 13.
  const ddp::testing::TemporaryDirectory scratch("ddprun-not-a-dir-");
  const std::string file = scratch.file("a-file");
  std::ofstream(file) << "a regular file where --log-dir needs a directory\n";
  auto unwritable = run_launcher(
      {"--standalone", "--run-id", "io", "--log-dir", file + "/logs", DDP_LAUNCH_WORKER, "env"},
      30s);
  EXPECT_EQ(unwritable.exit_code, static_cast<int>(ExitCode::kIo)) << unwritable.output;
  EXPECT_NE(unwritable.output.find("ddprun: error: cannot create the directory " + file +
                                   "/logs/io/attempt_0/0 for a worker's error file"),
            std::string::npos)
      << unwritable.output;
  EXPECT_NE(unwritable.output.find("check that --log-dir is writable"), std::string::npos)
      << unwritable.output;
}

// Two launchers, one per "node", meeting on loopback.
std::vector<ChildResult> two_nodes(const std::vector<std::string>& worker,
                                   const std::string& second_run_id = "twonodes",
                                   const std::string& rendezvous_timeout = "20") {
  const PortReservation reserved;
  const std::string port = std::to_string(reserved.port());
  auto node = [&](int rank, const std::string& run_id) {
    std::vector<std::string> args = two_node_args(rank, port, run_id, rendezvous_timeout);
    args.push_back(DDP_LAUNCH_WORKER);
    args.insert(args.end(), worker.begin(), worker.end());
    return ddprun(args);
  };
  return run_children({node(0, "twonodes"), node(1, second_run_id)}, 90s);
}

TEST(LauncherNodes, TwoNodesOnLoopbackMeetAndAllReduce) {
  auto results = two_nodes({"env"});
  for (int node : {0, 1}) {
    EXPECT_EQ(results[node].exit_code, 0) << results[0].output << results[1].output;
    EXPECT_NE(results[node].output.find("[" + std::to_string(node) +
                                        "] GROUP_RANK=" + std::to_string(node)),
              std::string::npos)
        << results[node].output;
    EXPECT_NE(results[node].output.find("WORLD_SIZE=2"), std::string::npos);
    EXPECT_NE(results[node].output.find("attempt 0: sum of ranks 1"), std::string::npos);
  }
}

TEST(LauncherNodes, WorkerKilledOnTheSecondNodeRestartsBoth) {
  auto results = two_nodes({"kill-once", "1"});
  for (int node : {0, 1}) {
    EXPECT_EQ(results[node].exit_code, 0) << results[0].output << results[1].output;
    EXPECT_NE(results[node].output.find("(restart 1 of 1)"), std::string::npos)
        << results[node].output;
    EXPECT_NE(results[node].output.find("attempt 1: sum of ranks 1"), std::string::npos)
        << results[node].output;
  }
}

TEST(LauncherNodes, TwoNodesOnLoopbackTrainTheToyTrainer) {
  const PortReservation reserved;
  const std::string port = std::to_string(reserved.port());
  auto node = [&](int rank) {
    return ddprun({"--nnodes", "2", "--node-rank", std::to_string(rank), "--master-addr",
                   "127.0.0.1", "--master-port", port, "--nproc-per-node", "1", "--run-id", "toy",
                   "--rendezvous-timeout", "20", DDP_TOY_TRAINER, "--epochs", "1"});
  };
  auto results = run_children({node(0), node(1)}, 90s);
  for (int n : {0, 1}) EXPECT_EQ(results[n].exit_code, 0) << results[n].output;
  // 2048 samples / (2 ranks x 32) = 32 steps, and rank 0 reports the end.
  EXPECT_NE(results[1].output.find("[1] epoch 0 step 32 loss"), std::string::npos)
      << results[1].output;
  EXPECT_NE(results[0].output.find("[0] final loss="), std::string::npos) << results[0].output;
}

TEST(LauncherNodes, JobsWithDifferentRunIdsNeverMerge) {
  auto results = two_nodes({"env"}, "another-job", "4");
  EXPECT_EQ(results[1].exit_code, 4) << results[1].output;
  EXPECT_NE(results[1].output.find("belongs to run 'twonodes', not to this run 'another-job'"),
            std::string::npos)
      << results[1].output;
  EXPECT_NE(results[0].exit_code, 0) << "node 0 should time out waiting for its second node";
}

}  // namespace
}  // namespace ddp::launch

// InteropTorchrun: ddp's toy trainer under the real torchrun of PyTorch 2.x,
// whose agent hosts the rendezvous store (Note [Joining torchrun's store] in
// src/comm/init.cpp), in each launch mode on loopback; every job is compared with
// the same job under ddprun, whose final parameters it must match bit for
// bit (params-digest). The tests run where a torchrun of PyTorch 2.x starts
// (CI's LibTorch 2.6 leg) and are skipped with the reason elsewhere; where
// CI requires the suite, a torchrun that is missing or does not start is a
// failure instead (Note [A skip CI does not allow] in
// tests/common/required_suites.hpp).

#include <gtest/gtest.h>
#include <unistd.h>

#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <sstream>

#include "common/required_suites.hpp"
#include "common/temporary_directory.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/environment.hpp"
#include "ddp/launch/child_process.hpp"
#include "ddp/launch/port_reservation.hpp"
#include "interop/interop_job.hpp"

namespace ddp::interop {
namespace {

using ddp::testing::TemporaryDirectory;
using launch::ChildResult;
using launch::ChildSpec;
using launch::run_children;
using namespace std::chrono_literals;

// What rank 0 says once per run under torchrun's store.
const std::string kUnauthenticated =
    "is torchrun's, which authenticates no one (PyTorch's SECURITY.md)";

int count(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

// The digest in whichever of `results` has it (the node of rank 0).
using interop::digest_of;  // the one of a single output, beside this one

std::string digest_of(const std::vector<ChildResult>& results) {
  for (const ChildResult& r : results) {
    if (digest_of(r.output) != "<none>") return digest_of(r.output);
  }
  return "<none>";
}

std::string outputs(const std::vector<ChildResult>& results) {
  std::string all;
  for (size_t i = 0; i < results.size(); ++i) {
    all += "--- torchrun " + std::to_string(i) + " (" + results[i].status() + ")\n" +
           results[i].output;
  }
  return all;
}

// Debian 13's PyTorch lacks libuv, which c10d's TCPStore uses by default:
// torchrun runs with torchrun_site/sitecustomize.py on PYTHONPATH.
std::string python_path() {
  const EnvironmentMap env = capture_environment();
  const auto own = env.find("PYTHONPATH");
  return std::string(DDP_TORCHRUN_SITE) +
         (own == env.end() || own->second.empty() ? "" : ":" + own->second);
}

// What torchrun's Python gets: the site directory, no bytecode written into
// the source tree, and its own temporary directory (torchrun leaves a log
// directory in TMPDIR after every run), removed when this process exits.
std::map<std::string, std::string> python_environment() {
  static const TemporaryDirectory temporaries("ddp-torchrun-");
  return {{"PYTHONPATH", python_path()},
          {"PYTHONDONTWRITEBYTECODE", "1"},
          {"TMPDIR", temporaries.string()}};
}

// The torchrun on PATH, or why these tests cannot run here.
struct Torchrun {
  std::string path;
  std::string skip_reason;  // empty: usable
};

Torchrun find_torchrun() {
  const EnvironmentMap env = capture_environment();
  std::stringstream dirs(env.count("PATH") ? env.at("PATH") : "");
  std::string path;
  for (std::string dir; path.empty() && std::getline(dirs, dir, ':');) {
    if (!dir.empty() && ::access((dir + "/torchrun").c_str(), X_OK) == 0) path = dir + "/torchrun";
  }
  if (path.empty()) {
    return {"",
            "no torchrun on PATH. InteropTorchrun runs in CI's LibTorch 2.6 leg, where "
            "scripts/libtorch2.sh installs Debian 13's python3-torch."};
  }
  // torchrun is a Python script; its interpreter tells which PyTorch it runs.
  std::ifstream script(path);
  std::string shebang;
  std::getline(script, shebang);
  std::vector<std::string> argv;
  std::stringstream words(shebang.rfind("#!", 0) == 0 ? shebang.substr(2) : "");
  for (std::string word; words >> word;) argv.push_back(word);
  if (argv.empty()) return {"", path + " is not a Python script, so not PyTorch's torchrun."};
  argv.insert(argv.end(), {"-c", "import torch; print('torch', torch.__version__)"});
  const ChildResult version = run_children({ChildSpec{argv, python_environment(), {}}}, 120s).at(0);
  std::smatch m;
  if (!std::regex_search(version.output, m, std::regex(R"(torch (\d+)\.(\S+))"))) {
    return {"", path + "'s Python cannot import torch (" + version.status() +
                    "): " + version.output.substr(0, 300)};
  }
  const std::string pytorch = "PyTorch " + m[1].str() + "." + m[2].str();
  if (std::stoi(m[1]) < 2) {
    return {"", path + " is " + pytorch +
                    "'s; InteropTorchrun needs torchrun 2.x, whose agent hosts the store in "
                    "every launch mode (Debian 12's 1.13 does not even start on Python 3.11)."};
  }
  const ChildResult help =
      run_children({ChildSpec{{path, "--help"}, python_environment(), kUnsetVariables}}, 120s)
          .at(0);
  if (help.exit_code != 0) {
    return {"", path + " (" + pytorch + ") does not start here (" + help.status() + "): " +
                    help.output.substr(help.output.size() > 600 ? help.output.size() - 600 : 0)};
  }
  return {path, ""};
}

const Torchrun& torchrun() {
  static const Torchrun found = find_torchrun();
  return found;
}

#define SKIP_WITHOUT_TORCHRUN_2()                                                        \
  if (!torchrun().skip_reason.empty()) DDP_SKIP_UNLESS_REQUIRED(torchrun().skip_reason); \
  static_assert(true)

// torchrun `launcher_args` --no-python TOY `job`.
ChildSpec under_torchrun(const std::vector<std::string>& launcher_args,
                         const std::vector<std::string>& job) {
  std::vector<std::string> argv = {torchrun().path};
  argv.insert(argv.end(), launcher_args.begin(), launcher_args.end());
  argv.insert(argv.end(), {"--no-python", DDP_TOY_TRAINER});
  argv.insert(argv.end(), job.begin(), job.end());
  return ChildSpec{argv, python_environment(), kUnsetVariables};
}

// Runs the launchers made for a port this test holds until they end (Note
// [A port held from choice to use]).
std::vector<ChildResult> on_a_reserved_port(
    const std::function<std::vector<ChildSpec>(const std::string& port)>& launchers) {
  const launch::PortReservation reserved;
  return run_children(launchers(std::to_string(reserved.port())), kDeadline);
}

// kJob's digest under ddprun.
const std::string& expected_digest() {
  static const std::string digest = [] {
    const ChildResult reference = under_ddprun(2, kJob);
    EXPECT_EQ(reference.exit_code, 0) << reference.output;
    return digest_of(reference.output);
  }();
  return digest;
}

TEST(InteropTorchrun, StandaloneTrainsAsUnderDdprun) {
  SKIP_WITHOUT_TORCHRUN_2();
  ASSERT_NE(expected_digest(), "<none>");
  const ChildResult run =
      run_children({under_torchrun({"--standalone", "--nproc-per-node", "2"}, kJob)}, kDeadline)
          .at(0);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_EQ(digest_of(run.output), expected_digest()) << run.output;
  EXPECT_EQ(count(run.output, kUnauthenticated), 1) << run.output;  // rank 0, once
  EXPECT_FALSE(contains(run.output, "has no job secret")) << run.output;
}

// The multi-node command lines of PyTorch's DDP tutorial, two "nodes" on
// loopback: torchrun's static rendezvous, whose store is node 0's agent's.
TEST(InteropTorchrun, StaticMultiNodeTrainsAsUnderDdprun) {
  SKIP_WITHOUT_TORCHRUN_2();
  ASSERT_NE(expected_digest(), "<none>");
  const auto nodes = on_a_reserved_port([](const std::string& port) {
    auto node = [&](int rank) {
      return under_torchrun(
          {"--nnodes", "2", "--node-rank", std::to_string(rank), "--nproc-per-node", "1",
           "--master-addr", "127.0.0.1", "--master-port", port},
          kJob);
    };
    return std::vector<ChildSpec>{node(0), node(1)};
  });
  for (const ChildResult& node : nodes) EXPECT_EQ(node.exit_code, 0) << outputs(nodes);
  EXPECT_EQ(digest_of(nodes[0].output), expected_digest()) << outputs(nodes);
  EXPECT_EQ(count(outputs(nodes), kUnauthenticated), 1) << outputs(nodes);
}

// torchrun's c10d rendezvous: ranks by joining order, the store shared by
// the agent of whichever node became rank 0; with a fixed node count and
// with a range (--nnodes 1:2, both nodes started together).
class InteropTorchrunC10d : public ::testing::TestWithParam<std::string> {};

TEST_P(InteropTorchrunC10d, RendezvousTrainsAsUnderDdprun) {
  SKIP_WITHOUT_TORCHRUN_2();
  ASSERT_NE(expected_digest(), "<none>");
  const auto nodes = on_a_reserved_port([this](const std::string& port) {
    auto node = [&] {
      return under_torchrun({"--nnodes", GetParam(), "--nproc-per-node", "1", "--rdzv-backend",
                             "c10d", "--rdzv-endpoint", "127.0.0.1:" + port, "--rdzv-id", "j1"},
                            kJob);
    };
    return std::vector<ChildSpec>{node(), node()};
  });
  for (const ChildResult& node : nodes) EXPECT_EQ(node.exit_code, 0) << outputs(nodes);
  EXPECT_EQ(digest_of(nodes), expected_digest()) << outputs(nodes);
  EXPECT_EQ(count(outputs(nodes), kUnauthenticated), 1) << outputs(nodes);
}

INSTANTIATE_TEST_SUITE_P(InteropTorchrun, InteropTorchrunC10d, ::testing::Values("2", "1:2"),
                         [](const auto& info) {
                           return info.param == "2" ? std::string("TwoNodes")
                                                    : std::string("OneToTwoNodes");
                         });

// Whether torchrun's agent logged the first run's failure as the kill of
// rank 1 (exit -9) or as what the kill caused on rank 0: its collective
// failing on the closed connection (ExitCode::kCollective). Both are right:
// the agent polls its workers (every 0.1 s) and names the earliest failure
// it finds, by the time in a worker's error file or else the time of the
// poll, so when rank 0 has written its error file and exited before the poll
// that sees rank 1's kill, rank 0 is named first.
bool torchrun_saw_the_kill(const std::string& output) {
  const std::string collective = std::to_string(static_cast<int>(base::ExitCode::kCollective));
  const std::regex killed(R"(failed \(exitcode: -9\) local_rank: 1 )");
  const std::regex peer_failed(R"(failed \(exitcode: )" + collective + R"(\) local_rank: 0 )");
  return std::regex_search(output, killed) ||
         (std::regex_search(output, peer_failed) && contains(output, "Connection closed by peer") &&
          contains(output, "A peer rank may have exited"));
}

// A worker SIGKILLed at step 10 (--kill-at, in the job's first run only:
// TORCHELASTIC_RESTART_COUNT 0); torchrun restarts both, they meet in the
// restart's own namespace of the agent's store, resume from the snapshot of
// step 8 and end bit-identical to an uninterrupted run under ddprun.
TEST(InteropTorchrun, KilledWorkerIsRestartedAndResumes) {
  SKIP_WITHOUT_TORCHRUN_2();
  const TemporaryDirectory reference_snapshots("ddp-interop-"), restarted_snapshots("ddp-interop-");
  const std::string reference_dir = reference_snapshots.string(),
                    restarted_dir = restarted_snapshots.string();
  auto job = [](const std::string& dir) {
    return std::vector<std::string>{"--epochs",           "2", "--seed",         "7",
                                    "--save-every-steps", "4", "--snapshot-dir", dir};
  };
  const ChildResult reference = under_ddprun(2, job(reference_dir));
  ASSERT_EQ(reference.exit_code, 0) << reference.output;
  ASSERT_NE(digest_of(reference.output), "<none>") << reference.output;

  std::vector<std::string> killed = job(restarted_dir);
  killed.insert(killed.end(), {"--kill-at", "1:10"});
  const ChildResult run =
      run_children({under_torchrun({"--standalone", "--nproc-per-node", "2", "--max-restarts", "1"},
                                   killed)},
                   kDeadline)
          .at(0);
  EXPECT_EQ(run.exit_code, 0) << run.output;
  EXPECT_TRUE(torchrun_saw_the_kill(run.output)) << run.output;
  EXPECT_TRUE(contains(run.output, "resumed at epoch 0, step 8")) << run.output;
  EXPECT_EQ(digest_of(run.output), digest_of(reference.output)) << run.output;
  EXPECT_EQ(count(run.output, kUnauthenticated), 2) << run.output;  // rank 0 of each run
}

// A worker's ddp error reaches torchrun's summary through the error file
// (TORCHELASTIC_ERROR_FILE): the root cause torchrun names carries that
// rank's message, the one ddprun shows for the same rank of the same job.
// (Both ranks fail; torchrun names the first it saw.)
TEST(InteropTorchrun, WorkersErrorIsShownInTorchrunsSummary) {
  SKIP_WITHOUT_TORCHRUN_2();
  const TemporaryDirectory dir("ddp-interop-");
  const std::string not_a_directory = dir.file("snapshots");
  std::ofstream(not_a_directory) << "a file where the snapshot directory should be\n";
  const std::vector<std::string> job = {"--epochs", "1", "--snapshot-dir", not_a_directory};
  const ChildResult reference = under_ddprun(2, job);
  std::map<std::string, std::string> message_of_rank;
  const std::regex error_line(R"(\[(\d+)\] error: ([^\n]+))");
  for (std::sregex_iterator it(reference.output.begin(), reference.output.end(), error_line), end;
       it != end; ++it) {
    message_of_rank[(*it)[1].str()] = (*it)[2].str();
  }
  ASSERT_EQ(message_of_rank.size(), 2u) << reference.output;

  const ChildResult run =
      run_children({under_torchrun({"--standalone", "--nproc-per-node", "2"}, job)}, kDeadline)
          .at(0);
  EXPECT_NE(run.exit_code, 0) << run.output;
  const size_t summary = run.output.find("Root Cause (first observed failure)");
  ASSERT_NE(summary, std::string::npos) << run.output;
  const std::string root_cause = run.output.substr(summary);
  std::smatch rank, error_file, traceback;
  ASSERT_TRUE(std::regex_search(root_cause, rank, std::regex(R"(rank +: (\d+) \(local_rank)")))
      << run.output;
  EXPECT_TRUE(
      std::regex_search(root_cause, error_file,
                        std::regex("error_file: \\S+/attempt_0/" + rank[1].str() + "/error.json")))
      << run.output;
  ASSERT_TRUE(std::regex_search(root_cause, traceback, std::regex(R"(traceback : ([^\n]+))")))
      << run.output;
  EXPECT_EQ(traceback[1].str(), message_of_rank[rank[1].str()]) << "rank " << rank[1] << "\n"
                                                                << run.output << "\n--- ddprun:\n"
                                                                << reference.output;
}

}  // namespace
}  // namespace ddp::interop

// torchrun's command lines, unchanged but for the program: the c10d
// rendezvous with ranks by joining order, --nnodes MIN:MAX with the last
// call, --rdzv-conf, --local-addr, --redirects and --tee with torchrun's
// values (Note [How nodes meet] in src/launch/node_rendezvous.hpp).

#include <gtest/gtest.h>
#include <signal.h>

#include <filesystem>
#include <fstream>
#include <thread>

#include "common/file_text.hpp"
#include "common/temporary_directory.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/launch/child_process.hpp"
#include "ddp/launch/port_reservation.hpp"
#include "launch/launcher_runs.hpp"

namespace ddp::launch {
namespace {

using namespace std::chrono_literals;

using ddp::testing::read_file;

// The multi-node command lines of PyTorch's DDP tutorial series
// (multinode.py), run on two "nodes" on loopback: only the program and its
// arguments differ.
TEST(LauncherTorchrun, TutorialMultinodeCommandLinesTrainOnTwoNodes) {
  const PortReservation reserved;
  const std::string endpoint = "127.0.0.1:" + std::to_string(reserved.port());
  auto node = [&](int rank) {
    return ddprun({"--nproc_per_node=1", "--nnodes=2", "--node_rank=" + std::to_string(rank),
                   "--rdzv_id=456", "--rdzv_backend=c10d", "--rdzv_endpoint=" + endpoint,
                   DDP_TOY_TRAINER, "--epochs", "1"});
  };
  auto results = run_children({node(0), node(1)}, 120s);
  for (int n : {0, 1}) EXPECT_EQ(results[n].exit_code, 0) << results[n].output;
  // 2048 samples / (2 ranks x 32) = 32 steps. c10d ranks the nodes by
  // joining order, so either launcher may hold rank 1.
  const std::string both = results[0].output + results[1].output;
  EXPECT_TRUE(contains(both, "[1] epoch 0 step 32 loss")) << both;
  EXPECT_TRUE(contains(both, "[0] final loss=")) << both;
}

// torchrun's elastic command line (--nnodes=1:4 ... --rdzv-backend=c10d),
// here 1:3 with two nodes: the job starts once the last call has passed,
// with both.
TEST(LauncherTorchrun, RangeOfNodesStartsWithEveryNodeThatJoinedBeforeTheLastCall) {
  const PortReservation reserved;
  const std::string endpoint = "127.0.0.1:" + std::to_string(reserved.port());
  const std::vector<std::string> args = {
      "--nnodes=1:3",           "--nproc-per-node=1",
      "--max-restarts=3",       "--rdzv-id=elastic",
      "--rdzv-backend=c10d",    "--rdzv-endpoint=" + endpoint,
      "--local-addr=127.0.0.2", "--rdzv-conf=last_call_timeout=8,join_timeout=60",
      DDP_LAUNCH_WORKER,        "env"};
  auto results = run_children({ddprun(args), ddprun(args)}, 120s);
  int group_rank_seen[2] = {0, 0};
  for (const auto& r : results) {
    ASSERT_EQ(r.exit_code, 0) << r.output;
    for (const char* line : {"] WORLD_SIZE=2", "] GROUP_WORLD_SIZE=2", "] MASTER_ADDR=127.0.0.2",
                             "] attempt 0: sum of ranks 1"}) {
      EXPECT_TRUE(contains(r.output, line)) << line << " missing in\n" << r.output;
    }
    for (int g : {0, 1})
      group_rank_seen[g] += contains(r.output, "GROUP_RANK=" + std::to_string(g));
    // The host waited out the last call for a third node.
    EXPECT_GE(r.seconds, 8.0) << r.output;
  }
  EXPECT_EQ(group_rank_seen[0], 1);
  EXPECT_EQ(group_rank_seen[1], 1);
}

TEST(LauncherTorchrun, MinimumAloneStartsAfterTheLastCallAndTooFewTimeOut) {
  const PortReservation reserved;
  const std::string port = std::to_string(reserved.port());
  auto alone = run_launcher({"--nnodes", "1:2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                             "127.0.0.1:" + port, "--rdzv-conf", "last_call_timeout=1",
                             DDP_LAUNCH_WORKER, "env"});
  EXPECT_EQ(alone.exit_code, 0) << alone.output;
  EXPECT_TRUE(contains(alone.output, "[0] GROUP_WORLD_SIZE=1")) << alone.output;
  EXPECT_TRUE(contains(alone.output, "[0] WORLD_SIZE=1")) << alone.output;
  EXPECT_GE(alone.seconds, 1.0);

  auto too_few = run_launcher({"--nnodes", "2:3", "--rdzv-backend", "c10d", "--rdzv-endpoint",
                               "127.0.0.1:" + port, "--rdzv-conf", "join_timeout=2",
                               DDP_LAUNCH_WORKER, "env"});
  EXPECT_EQ(too_few.exit_code, static_cast<int>(ExitCode::kTimeout)) << too_few.output;
  EXPECT_TRUE(contains(too_few.output,
                       "only 1 of at least 2 node(s) joined the rendezvous at "
                       "127.0.0.1:" +
                           port + " within its join_timeout of 2 s"))
      << too_few.output;
  EXPECT_FALSE(contains(too_few.output, "RANK=")) << "no worker may start";
}

TEST(LauncherTorchrun, RedirectsAndTeeTakeTorchrunsValuesPerLocalRank) {
  const ddp::testing::TemporaryDirectory log_dir("ddprun-streams-");
  const std::string dir = log_dir.string();
  auto run = [&](const std::string& run_id, std::vector<std::string> streams) {
    std::vector<std::string> args = {"--standalone", "--nproc-per-node", "2", "--run-id", run_id};
    args.insert(args.end(), streams.begin(), streams.end());
    args.insert(args.end(), {DDP_LAUNCH_WORKER, "env"});
    return run_launcher(args);
  };
  auto file = [&](const std::string& run_id, int local, const char* name) {
    return dir + "/" + run_id + "/attempt_0/" + std::to_string(local) + "/" + name;
  };
  // Both streams of both ranks to files; local rank 0's stdout shown too.
  auto mapped = run("mapped", {"--log-dir", dir, "--redirects", "3", "--tee", "0:1"});
  ASSERT_EQ(mapped.exit_code, 0) << mapped.output;
  EXPECT_TRUE(contains(mapped.output, "[0] RANK=0\n")) << mapped.output;
  EXPECT_FALSE(contains(mapped.output, "[0] stderr of local rank 0")) << mapped.output;
  EXPECT_FALSE(contains(mapped.output, "[1] ")) << mapped.output;
  for (int local : {0, 1}) {
    const std::string n = std::to_string(local);
    EXPECT_TRUE(contains(read_file(file("mapped", local, "stdout.log")), "RANK=" + n + "\n"));
    EXPECT_EQ(read_file(file("mapped", local, "stderr.log")), "stderr of local rank " + n + "\n");
  }
  // --log-dir alone keeps error files there, and the streams on the console.
  auto console = run("console", {"--log-dir", dir});
  ASSERT_EQ(console.exit_code, 0) << console.output;
  EXPECT_TRUE(contains(console.output, "[1] RANK=1\n")) << console.output;
  EXPECT_TRUE(contains(console.output, "[1] stderr of local rank 1\n")) << console.output;
  EXPECT_FALSE(std::filesystem::exists(file("console", 0, "stdout.log")));
  EXPECT_TRUE(std::filesystem::is_directory(dir + "/console/attempt_0/0"));

  // Without --log-dir, as torchrun: a fresh directory, named on the console.
  auto fresh = run("fresh", {"--redirects", "1:2"});
  ASSERT_EQ(fresh.exit_code, 0) << fresh.output;
  const std::string said = "ddprun: --redirects/--tee without --log-dir: the workers' logs go to ";
  const size_t at = fresh.output.find(said);
  ASSERT_NE(at, std::string::npos) << fresh.output;
  const std::string logs =
      fresh.output.substr(at + said.size(), fresh.output.find('\n', at) - at - said.size());
  EXPECT_EQ(read_file(logs + "/fresh/attempt_0/1/stderr.log"), "stderr of local rank 1\n");
  EXPECT_TRUE(contains(fresh.output, "[0] stderr of local rank 0\n")) << fresh.output;
  EXPECT_FALSE(contains(fresh.output, "[1] stderr")) << fresh.output;
  std::filesystem::remove_all(logs);
}

TEST(LauncherTorchrun, NprocPerNodeCpuStartsOneWorkerPerCore) {
  auto r = run_launcher({"--standalone", "--nproc_per_node=cpu", DDP_LAUNCH_WORKER, "env"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const int cores = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  EXPECT_EQ(count(r.output, "] LOCAL_WORLD_SIZE=" + std::to_string(cores) + "\n"), cores)
      << r.output;
}

TEST(LauncherTorchrun, BadValuesAreClearErrors) {
  const std::string c10d_two[] = {"--rdzv-backend", "c10d", "--nnodes", "2"};
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"--nnodes", "0"}, "--nnodes is '0'; a job needs at least 1 node, and MIN must not exceed"},
      {{"--nnodes", "3:2"}, "--nnodes is '3:2'; a job needs at least 1 node, and MIN must not"},
      {{"--nnodes", "two"},
       "--nnodes is 'two'; it must be a number of nodes such as 2, or a range"},
      {{"--nnodes", "1:2"}, "--nnodes is 1:2, a range, but the static rendezvous needs a fixed"},
      {{"--rdzv-backend", "etcd"}, "--rdzv-backend is 'etcd': ddprun has no etcd client. Use c10d"},
      {{"--rdzv-backend", "zookeeper"}, "--rdzv-backend is 'zookeeper'; it must be static"},
      {{c10d_two[0], c10d_two[1], c10d_two[2], c10d_two[3]},
       "--rdzv-backend c10d needs --rdzv-endpoint HOST[:PORT]"},
      {{c10d_two[0], c10d_two[1], c10d_two[2], c10d_two[3], "--rdzv-endpoint", "node0:99999"},
       "--rdzv-endpoint is 'node0:99999'; it must be HOST[:PORT] with a port between 1 and 65535"},
      {{"--rdzv-conf", "keep_alive_interval=5"},
       "--rdzv-conf has the key 'keep_alive_interval', which ddprun does not use; it takes "
       "join_timeout, last_call_timeout, node_timeout and takeover_timeout (seconds) and "
       "is_host"},
      {{"--rdzv-conf", "node_timeout=0"},
       "--rdzv-conf node_timeout is '0'; it must be a positive number of seconds."},
      {{"--rdzv-conf", "join_timeout=-1"},
       "--rdzv-conf join_timeout is '-1'; it must be a positive number of seconds."},
      {{"--rdzv-conf", "is_host=maybe"},
       "--rdzv-conf is_host is 'maybe'; it must be true or false"},
      {{"--redirects", "4"}, "--redirects is '4'; torchrun's values are 0 (none), 1 (stdout)"},
      {{"--tee", "0:x"}, "--tee is '0:x'; torchrun's values are 0 (none)"},
  };
  for (const auto& [args, message] : cases) {
    std::vector<std::string> line = args;
    line.insert(line.end(), {DDP_LAUNCH_WORKER, "env"});
    auto r = run_launcher(line, 30s);
    EXPECT_EQ(r.exit_code, static_cast<int>(ExitCode::kConfig)) << r.output;
    EXPECT_TRUE(contains(r.output, "ddprun: error: " + message)) << message << "\n" << r.output;
    EXPECT_FALSE(contains(r.output, "RANK=")) << r.output;
  }
}

}  // namespace
}  // namespace ddp::launch

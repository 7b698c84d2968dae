// The child-process runner the multi-process tests stand on: exit codes,
// signals, output, environment, and the deadline that kills what hangs.

#include <gtest/gtest.h>
#include <signal.h>

#include "ddp/launch/child_process.hpp"

namespace ddp::launch {
namespace {

ChildSpec shell(const std::string& script) { return ChildSpec{{"/bin/sh", "-c", script}, {}, {}}; }

TEST(CoreChildProcess, ReportsExitCodesAndOutputPerChild) {
  auto results = run_children({shell("echo out; echo err >&2; exit 3"), shell("exit 0")},
                              std::chrono::seconds(10));
  ASSERT_EQ(results.size(), 2u);
  EXPECT_EQ(results[0].exit_code, 3);
  EXPECT_EQ(results[0].output, "out\nerr\n");
  EXPECT_EQ(results[1].exit_code, 0);
  EXPECT_GT(results[0].pid, 0);
  EXPECT_NE(results[0].pid, results[1].pid);
}

TEST(CoreChildProcess, ReportsSignals) {
  auto results = run_children({shell("kill -9 $$")}, std::chrono::seconds(10));
  EXPECT_EQ(results[0].term_signal, SIGKILL);
  EXPECT_EQ(results[0].exit_code, -1);
  EXPECT_EQ(results[0].status().rfind("signal 9", 0), 0u);
}

TEST(CoreChildProcess, EnvironmentIsSetAndUnset) {
  setenv("DDP_TEST_INHERITED", "yes", 1);
  ChildSpec spec = shell("echo \"[$DDP_TEST_SET][${DDP_TEST_INHERITED:-gone}]\"");
  spec.env["DDP_TEST_SET"] = "v";
  spec.unset_env.push_back("DDP_TEST_INHERITED");
  auto results = run_children({spec}, std::chrono::seconds(10));
  unsetenv("DDP_TEST_INHERITED");
  EXPECT_EQ(results[0].output, "[v][gone]\n");
}

TEST(CoreChildProcess, DeadlineKillsWhatHangs) {
  const auto start = std::chrono::steady_clock::now();
  // The second child ignores SIGTERM: it must be killed after the grace.
  auto results = run_children({shell("exit 0"), shell("trap '' TERM; sleep 60")},
                              std::chrono::milliseconds(500), std::chrono::milliseconds(300));
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_LT(elapsed, 5.0);
  EXPECT_EQ(results[0].exit_code, 0);
  EXPECT_FALSE(results[0].killed_at_deadline);
  EXPECT_TRUE(results[1].killed_at_deadline);
  EXPECT_EQ(kill(results[1].pid, 0), -1) << "the hung child is still alive";
}

TEST(CoreChildProcess, MissingProgramExits127) {
  auto results =
      run_children({ChildSpec{{"/nonexistent/program"}, {}, {}}}, std::chrono::seconds(10));
  EXPECT_EQ(results[0].exit_code, 127);
  EXPECT_NE(results[0].output.find("exec failed"), std::string::npos);
}

}  // namespace
}  // namespace ddp::launch

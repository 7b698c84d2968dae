// The collective timeline: real ranks write Chrome trace-event files that
// parse as JSON and hold one event per collective, also when a rank is
// SIGKILLed; and the recorder's rules, in this process with a group of one.

#include <gtest/gtest.h>
#include <torch/torch.h>
#include <torch/csrc/distributed/c10d/HashStore.hpp>

#include <csignal>
#include <fstream>
#include <regex>
#include <set>
#include <string>

#include "comm/backends/backends.hpp"
#include "comm/collective_name.hpp"
#include "common/expect_checks.hpp"
#include "common/temporary_directory.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/init.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/timeline/timeline.hpp"
#include "multiprocess/harness.hpp"
#include "timeline/counting_group.hpp"
#include "timeline/timeline_observer.hpp"
#include "timeline/trace_checks.hpp"

namespace ddp::testing {
namespace {

EnvironmentFor with_timeline(const std::string& path) {
  return [path](int rank, int world, int port) {
    auto env = torchrun_environment(rank, world, port);
    env[timeline::kEnvironmentVariable] = path;
    return env;
  };
}

int64_t issued_in(const std::string& output) {
  std::smatch match;
  static const std::regex pattern("collectives issued: ([0-9]+)");
  return std::regex_search(output, match, pattern) ? std::stoll(match[1]) : -1;
}

class TimelineRecording : public ::testing::TestWithParam<std::string> {};

TEST_P(TimelineRecording, TwoRanksWriteOneEventPerCollective) {
  const TemporaryDirectory dir("ddp-timeline-");
  auto results = run_ranks(2, {"record", GetParam()}, with_timeline(dir.file("tl-%r.json")),
                           std::chrono::seconds(120));
  // The worker's checks of its own file (timeline_worker.cpp, record()).
  expect_checks(results, timeline_record_check_names());
  std::vector<std::string> files;
  int64_t total = 0;
  for (int rank = 0; rank < 2; ++rank) {
    ASSERT_EQ(results[rank].exit_code, 0) << describe(results);
    const int64_t issued = issued_in(results[rank].output);
    // At least 9 user collectives, 3 DDP buckets, 2 + 6 DistributedOptimizer
    // all-reduces and 4 + 10 for the broadcasts (plus DDP's start-up).
    ASSERT_GE(issued, 34) << describe(results);
    // Read back here too, independently of the worker's own checks.
    const std::string file = dir.file("tl-" + std::to_string(rank) + ".json");
    nlohmann::json trace = read_trace(file);
    ASSERT_TRUE(trace.is_array()) << file;
    EXPECT_EQ(static_cast<int64_t>(complete_events(trace).size()), issued);
    bool named_process = false;
    for (const auto& event : trace) {
      if (event.value("name", "") == "process_name") {
        named_process = event.at("args").at("name") == "rank " + std::to_string(rank);
      }
    }
    EXPECT_TRUE(named_process) << "no process_name metadata for rank " << rank;
    files.push_back(file);
    total += issued;
  }
  const std::string merged = dir.file("merged.json");
  timeline::merge(files, merged);
  auto events = complete_events(read_trace(merged));
  EXPECT_EQ(static_cast<int64_t>(events.size()), total);
  std::set<int> pids;
  for (const auto& event : events) pids.insert(event.at("pid").get<int>());
  EXPECT_EQ(pids, (std::set<int>{0, 1}));
}

// gloo: the worker's CountingGroup hands each collective to Gloo's public
// method; auto: one more backend in between. Each is recorded once.
INSTANTIATE_TEST_SUITE_P(Timeline, TimelineRecording, ::testing::Values("gloo", "auto"));

TEST(TimelineKilled, SigkillMidRunLeavesValidJson) {
  const TemporaryDirectory dir("ddp-timeline-");
  auto results = run_ranks(2, {"killed", "gloo"}, with_timeline(dir.file("tl-%r.json")),
                           std::chrono::seconds(60));
  ASSERT_EQ(results[1].term_signal, SIGKILL) << describe(results);
  EXPECT_NE(results[0].exit_code, 0) << describe(results);
  EXPECT_FALSE(results[0].killed_at_deadline) << describe(results);
  // Rank 1 completed 5 all-reduces; the one in flight when it died was never
  // finished, so it is not in the file.
  nlohmann::json killed = read_trace(dir.file("tl-1.json"));
  ASSERT_TRUE(killed.is_array()) << "the SIGKILLed rank's file is not valid JSON";
  EXPECT_EQ(complete_events(killed).size(), 5u);
  nlohmann::json survivor = read_trace(dir.file("tl-0.json"));
  ASSERT_TRUE(survivor.is_array());
  EXPECT_GE(complete_events(survivor).size(), 5u);
}

TEST(TimelinePaths, RankReplacesPercentROrFollowsThePrefix) {
  EXPECT_EQ(timeline::path_for_rank("/tmp/t-%r.json", 3), "/tmp/t-3.json");
  EXPECT_EQ(timeline::path_for_rank("/tmp/%r/t-%r.json", 12), "/tmp/12/t-12.json");
  EXPECT_EQ(timeline::path_for_rank("/tmp/t-", 0), "/tmp/t-0.json");
  EXPECT_THROW(timeline::TimelineOptions(""), ConfigError);
}

class TimelineLocal : public ::testing::Test {
 protected:
  void SetUp() override { group_ = init(InitOptions().backend("gloo").rank(0).world_size(1)); }
  void TearDown() override { timeline::stop(); }

  std::shared_ptr<ProcessGroup> group_;
  const TemporaryDirectory dir_{"ddp-timeline-"};
};

TEST_F(TimelineLocal, FileIsValidJsonAfterEveryEventAndAfterStop) {
  timeline::start(*group_, timeline::TimelineOptions(dir_.file("t%r.json")));
  const std::string path = dir_.file("t0.json");
  EXPECT_EQ(timeline::current_path(), path);
  for (int i = 1; i <= 3; ++i) {
    group_->all_reduce(torch::ones({8}), ReduceOp::kSum);
    nlohmann::json trace = read_trace(path);
    ASSERT_TRUE(trace.is_array()) << "invalid after event " << i;
    EXPECT_EQ(complete_events(trace).size(), static_cast<size_t>(i));
  }
  timeline::start(*group_, timeline::TimelineOptions(dir_.file("t%r.json")));  // same path: no-op
  EXPECT_EQ(timeline::events_written(), 3);
  timeline::stop();
  EXPECT_FALSE(timeline::recording());
  EXPECT_EQ(timeline::current_path(), "");
  group_->all_reduce(torch::ones({8}), ReduceOp::kSum);  // not recorded
  EXPECT_EQ(complete_events(read_trace(path)).size(), 3u);
}

TEST_F(TimelineLocal, StartingElsewhereIsAConfigErrorAndAMissingDirectoryAnIoError) {
  timeline::start(*group_, timeline::TimelineOptions(dir_.file("a%r.json")));
  try {
    timeline::start(*group_, timeline::TimelineOptions(dir_.file("b%r.json")));
    FAIL() << "a second timeline started";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("already recording into '" + dir_.file("a0.json")),
              std::string::npos)
        << e.what();
  }
  timeline::stop();
  try {
    timeline::start(*group_, timeline::TimelineOptions(dir_.file("missing/t%r.json")));
    FAIL() << "started into a missing directory";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot create '" + dir_.file("missing/t0.json") +
                                         "': No such file or directory"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(TimelineLocal, InnermostScopeNamesAndFallbacksYieldToOthers) {
  timeline::start(*group_, timeline::TimelineOptions(dir_.file("n%r.json")));
  {
    timeline::NameScope outer("outer");
    group_->all_reduce(torch::ones({2}));
    {
      timeline::NameScope inner("inner");
      group_->broadcast(torch::ones({2}), 0);
    }
    ddp::comm::detail::CollectiveName fallback("fallback", -1, /*fallback=*/true);
    group_->barrier();  // "outer" still wins over a fallback
  }
  {
    ddp::comm::detail::CollectiveName fallback("helper", -1, /*fallback=*/true);
    ddp::comm::detail::CollectiveName bucket("bucket", 7);
    group_->all_reduce(torch::ones({2}));
  }
  {
    ddp::comm::detail::CollectiveName fallback("helper", -1, /*fallback=*/true);
    group_->all_gather(torch::empty({2}), torch::ones({2}));
  }
  group_->reduce_scatter(torch::empty({2}), torch::ones({2}), ReduceOp::kMax);
  auto events = complete_events(read_trace(dir_.file("n0.json")));
  std::vector<std::string> names;
  for (const auto& e : events) names.push_back(e.at("name"));
  EXPECT_EQ(names, (std::vector<std::string>{"outer", "inner", "outer", "bucket 7", "helper",
                                             "reduce_scatter(max)"}));
  EXPECT_EQ(events[1].at("args").at("root"), 0);
  EXPECT_FALSE(events[2].at("args").contains("bytes"));  // a barrier carries no tensor
}

TEST_F(TimelineLocal, NestedBackendsAreRecordedOnce) {
  auto counting = std::make_shared<CountingGroup>(group_);
  auto twice = std::make_shared<CountingGroup>(counting);
  timeline::start(*group_, timeline::TimelineOptions(dir_.file("c%r.json")));
  twice->all_reduce(torch::ones({4}));
  twice->broadcast(torch::ones({4}), 0);
  counting->barrier();
  EXPECT_EQ(twice->issued(), 2);
  EXPECT_EQ(counting->issued(), 3);
  EXPECT_EQ(complete_events(read_trace(dir_.file("c0.json"))).size(), 3u);
}

// A Gloo backend of one rank made without init(): no observer.
std::shared_ptr<ProcessGroup> bare_gloo_like(const ProcessGroup& group) {
  backends::BackendContext context;
  context.topology = group.topology();
  context.store = c10::make_intrusive<c10d::HashStore>();
  context.collective_timeout = group.collective_timeout();
  return backends::make_gloo_process_group(context);
}

bool has_timeline_observer(const ProcessGroup& group) {
  for (const auto& observer : group.observers()) {
    if (observer == timeline::detail::TimelineObserver::get()) return true;
  }
  return false;
}

// The timeline is an observer that init() adds (Note [The timeline as an
// observer]): an backend made without init() records nothing, a group made
// by hand is recorded once given to timeline::recorded(), and giving it
// twice changes nothing.
TEST_F(TimelineLocal, RecordsGroupsFromInitAndGroupsWrappedByRecorded) {
  ASSERT_TRUE(has_timeline_observer(*group_))
      << "init() returned " << group_->backend_name() << " without the timeline's observer";
  EXPECT_EQ(group_->backend_name(), "gloo");
  const size_t observers = group_->observers().size();
  EXPECT_EQ(timeline::recorded(group_), group_);
  EXPECT_EQ(group_->observers().size(), observers) << "recorded() added a second observer";
  EXPECT_THROW(timeline::recorded(nullptr), InvalidArgumentError);

  auto by_hand = std::make_shared<CountingGroup>(bare_gloo_like(*group_));
  timeline::start(*group_, timeline::TimelineOptions(dir_.file("d%r.json")));
  by_hand->all_reduce(torch::ones({4}));   // not recorded: not wrapped
  group_->broadcast(torch::ones({4}), 0);  // recorded
  auto wrapped = timeline::recorded(by_hand);
  wrapped->all_reduce(torch::ones({4}));  // recorded, once
  std::vector<std::string> names;
  for (const auto& e : complete_events(read_trace(dir_.file("d0.json"))))
    names.push_back(e.at("name"));
  EXPECT_EQ(names, (std::vector<std::string>{"broadcast", "all_reduce(sum)"}));
  EXPECT_EQ(by_hand->issued(), 2);
}

TEST_F(TimelineLocal, MergeRejectsFilesThatAreNotTimelines) {
  std::ofstream(dir_.file("object.json")) << "{}";
  EXPECT_THROW(timeline::merge({dir_.file("object.json")}, dir_.file("out.json")),
               InvalidArgumentError);
  try {
    timeline::merge({dir_.file("absent.json")}, dir_.file("out.json"));
    FAIL() << "merged a missing file";
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot read '" + dir_.file("absent.json") + "'"),
              std::string::npos);
  }
}

}  // namespace
}  // namespace ddp::testing

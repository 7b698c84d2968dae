// The flight recorder on a real one-rank group (the timeouts, on real
// ranks under ddprun, are in tests/launch/stall_test.cpp).

#include "ddp/comm/flight_recorder.hpp"

#include <ATen/ATen.h>
#include <gtest/gtest.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <thread>

#include "ddp/base/errors.hpp"
#include "ddp/comm/error_file.hpp"
#include "ddp/comm/init.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/timeline/timeline.hpp"

namespace ddp {
namespace {

namespace fr = flight_recorder;

double now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string temp_path(const std::string& name) {
  return (std::filesystem::temp_directory_path() /
          (name + "-" + std::to_string(::getpid()) + ".bin"))
      .string();
}

// 70 all-reduces, a broadcast and a barrier: the ring keeps the last 64.
std::vector<fr::Entry> issue_72(ProcessGroup& group) {
  for (int i = 0; i < 70; ++i) group.all_reduce(at::ones({3}));
  group.broadcast(at::zeros({5}, at::kLong));
  group.barrier();
  std::vector<fr::Entry> all = fr::entries();
  return std::vector<fr::Entry>(all.end() - std::min<size_t>(all.size(), 64), all.end());
}

TEST(CoreFlightRecorder, KeepsTheLast64CollectivesOfAGroupInOrder) {
  auto group = init(InitOptions(), EnvironmentMap{});
  const double before = now();
  const std::vector<fr::Entry> kept = issue_72(*group);
  const double after = now();
  ASSERT_EQ(kept.size(), 64u);
  EXPECT_EQ(fr::entries().size(), 64u) << "the ring holds kCapacity entries";
  for (size_t i = 0; i < kept.size(); ++i) {
    const fr::Entry& e = kept[i];
    EXPECT_EQ(e.sequence, 9 + static_cast<int64_t>(i)) << "the newest 64 of 72, in order";
    EXPECT_EQ(e.state, fr::State::kCompleted) << e.describe();
    EXPECT_GE(e.start_time, before - 0.001);
    EXPECT_LE(e.start_time + e.duration, after + 0.001);
    if (i < 62) {
      EXPECT_EQ(e.operation, "all_reduce(sum)");
      EXPECT_EQ(e.dtype, "float32");
      EXPECT_EQ(e.numel, 3);
      EXPECT_EQ(e.bytes, 12);
    }
  }
  EXPECT_EQ(kept[62].describe(), "#71 broadcast(root 0) of 5 int64 (40 B)");
  EXPECT_EQ(kept[63].describe(), "#72 barrier");
  const std::string table = fr::format(kept, 0);
  EXPECT_EQ(table.rfind("flight recorder of rank 0: the last 64 collective(s), oldest first\n", 0),
            0u)
      << table;
  EXPECT_NE(table.find("\n  #72 barrier, started "), std::string::npos) << table;
  EXPECT_NE(table.find(" UTC, completed in 0."), std::string::npos) << table;
}

TEST(CoreFlightRecorder, ACollectiveIsIssuedUntilItsWaitReturnsAndCarriesItsName) {
  auto group = init(InitOptions(), EnvironmentMap{});
  Work work;
  const auto before = std::chrono::steady_clock::now();
  {
    timeline::NameScope scope("eval metrics");
    work = group->all_gather_async(at::zeros({2}, at::kDouble), at::ones({2}, at::kDouble));
  }
  fr::Entry issued = fr::entries().back();
  EXPECT_EQ(issued.state, fr::State::kIssued);
  EXPECT_EQ(issued.duration, 0.0);
  EXPECT_EQ(issued.describe(), "#1 all_gather 'eval metrics' of 2 float64 (16 B)");
  // It ends at the wait, not at the return (Note [When a collective ends]).
  std::this_thread::sleep_for(std::chrono::milliseconds(30));
  work.wait();
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - before).count();
  fr::Entry done = fr::entries().back();
  EXPECT_EQ(done.sequence, 1);
  EXPECT_EQ(done.state, fr::State::kCompleted);
  EXPECT_GE(done.duration, 0.030);
  EXPECT_LE(done.duration, elapsed);
  EXPECT_EQ(fr::to_string(fr::State::kTimedOut), std::string("timed out"));
}

TEST(CoreFlightRecorder, TheFileHoldsTheRingForAnotherProcess) {
  const std::string path = temp_path("ddp-flight");
  auto group = init(InitOptions(), EnvironmentMap{{fr::kFileVariable, path}});
  issue_72(*group);
  const auto record = fr::read_file(path);
  ASSERT_TRUE(record.has_value()) << path;
  EXPECT_EQ(record->rank, 0);
  EXPECT_EQ(record->world_size, 1);
  EXPECT_EQ(record->pid, static_cast<int64_t>(::getpid()));
  const std::vector<fr::Entry> held = fr::entries();
  ASSERT_EQ(record->entries.size(), held.size());
  for (size_t i = 0; i < held.size(); ++i) {
    EXPECT_EQ(record->entries[i].describe(), held[i].describe());
    EXPECT_EQ(record->entries[i].state, held[i].state);
    EXPECT_NEAR(record->entries[i].start_time, held[i].start_time, 1e-6);
  }
  EXPECT_EQ(std::filesystem::file_size(path), 64u + 64u * 192u) << "Note [The ring's file]";
  std::filesystem::remove(path);
}

TEST(CoreFlightRecorder, ReadFileRejectsWhatIsNotARing) {
  EXPECT_FALSE(fr::read_file("/nonexistent/flight_recorder.bin").has_value());
  const std::string path = temp_path("ddp-not-a-ring");
  std::ofstream(path) << std::string(64 + 64 * 192, 'x');
  EXPECT_FALSE(fr::read_file(path).has_value()) << "wrong magic";
  std::ofstream(path) << "DDPFR01";
  EXPECT_FALSE(fr::read_file(path).has_value()) << "truncated";
  std::filesystem::remove(path);
}

TEST(CoreFlightRecorder, ErrorFilesCarryTheRing) {
  auto group = init(InitOptions(), EnvironmentMap{});
  issue_72(*group);
  const std::string path = temp_path("ddp-error") + ".json";
  ASSERT_TRUE(record_error_to(path, "the job stalled", 0, 5));
  std::ifstream in(path);
  const nlohmann::json record = nlohmann::json::parse(in, nullptr, false);
  ASSERT_TRUE(record.is_object());
  const auto& ring = record["message"]["extraInfo"]["flight_recorder"];
  ASSERT_TRUE(ring.is_array());
  ASSERT_EQ(ring.size(), 64u);
  EXPECT_EQ(ring.back()["operation"], "barrier");
  EXPECT_EQ(ring.back()["state"], "completed");
  EXPECT_EQ(ring.back()["sequence"], 72);
  EXPECT_EQ(ring[0]["operation"], "all_reduce(sum)");
  EXPECT_EQ(ring[0]["bytes"], 12);
  std::filesystem::remove(path);
}

TEST(CoreFlightRecorder, RecordedRejectsANullGroupAndWrapsOnce) {
  EXPECT_THROW(fr::recorded(nullptr), InvalidArgumentError);
  auto group = init(InitOptions(), EnvironmentMap{});
  auto inner = fr::recorded(group);
  EXPECT_EQ(fr::recorded(inner), inner);
}

}  // namespace
}  // namespace ddp

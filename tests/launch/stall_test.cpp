// A hung job explains itself: the stall report from known positions
// (Note [Reading a stall]), then the real ddprun with a rank that stops.

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include "common/temporary_directory.hpp"
#include "launch/launcher_runs.hpp"
#include "launch/stall_report.hpp"

namespace ddp::launch {
namespace {

using flight_recorder::Entry;
using flight_recorder::State;

Entry entry(int64_t sequence, std::string operation, std::string dtype, int64_t numel,
            int64_t bytes, State state, double duration = 0) {
  Entry e;
  e.sequence = sequence;
  e.operation = std::move(operation);
  e.dtype = std::move(dtype);
  e.numel = numel;
  e.bytes = bytes;
  e.state = state;
  e.duration = duration;
  return e;
}

Entry sum(int64_t sequence, State state, double duration = 0) {
  return entry(sequence, "all_reduce(sum)", "int64", 1, 8, state, duration);
}

TEST(LauncherStallReport, ARankBehindStoppedWhileTheOthersWaited) {
  const std::string report = describe_stall(
      {{0, sum(6, State::kFailed, 1.7)},
       {1, entry(5, "broadcast(root 0)", "float32", 4, 16, State::kCompleted, 0.001)},
       {2, sum(6, State::kTimedOut, 1.5)},
       {3, std::nullopt}});
  EXPECT_EQ(report,
            "rank 3 issued no collective; rank 1 stopped after collective #5 broadcast(root 0) "
            "of 4 float32 (16 B) (completed) while ranks 0, 2 waited in collective #6 "
            "all_reduce(sum) of 1 int64 (8 B) (timed out after 1.500 s)");
}

TEST(LauncherStallReport, DifferentCollectivesAtTheSameNumberAreNamed) {
  EXPECT_EQ(describe_stall({{0, sum(3, State::kTimedOut, 2)},
                            {1, entry(3, "broadcast(root 0)", "float32", 4, 16, State::kIssued)},
                            {2, sum(3, State::kIssued)}}),
            "the ranks issued different collectives as #3: ranks 0, 2 all_reduce(sum) of 1 "
            "int64 (8 B); rank 1 broadcast(root 0) of 4 float32 (16 B). Every rank must issue "
            "the same collectives in the same order.");
}

TEST(LauncherStallReport, EveryRankInTheSameCollectiveIsAStallBetweenThem) {
  EXPECT_EQ(describe_stall({{0, sum(4, State::kTimedOut, 2)}, {1, sum(4, State::kCompleted)}}),
            "every rank reached collective #4 all_reduce(sum) of 1 int64 (8 B); rank 0 did not "
            "finish it, rank 1 did: the backend or the network between them stalled.");
}

TEST(LauncherStallReport, NothingToSayWhenNoCollectiveIsUnfinished) {
  EXPECT_EQ(describe_stall({{0, sum(9, State::kCompleted)}, {1, sum(9, State::kCompleted)}}), "");
  EXPECT_EQ(describe_stall({{0, std::nullopt}, {1, std::nullopt}}), "");
  EXPECT_EQ(describe_stall({}), "");
}

TEST(LauncherStallReport, RankListsAndPositionsRoundTrip) {
  EXPECT_EQ(rank_list({8, 0, 2, 6, 7, 5, 3}), "0, 2, 3, 5-8");
  EXPECT_EQ(rank_list({4}), "4");
  Entry e = entry(12, "reduce_scatter(average)", "bfloat16", 1024, 2048, State::kTimedOut, 3.25);
  e.name = "ddp.bucket 3";
  e.group = 1;
  e.start_time = 1790000000.125;
  const auto back = decode_position(encode_position({7, e}));
  ASSERT_TRUE(back.has_value());
  EXPECT_EQ(back->rank, 7);
  ASSERT_TRUE(back->last.has_value());
  EXPECT_EQ(back->last->describe(), e.describe());
  EXPECT_EQ(back->last->state, State::kTimedOut);
  EXPECT_EQ(back->last->group, 1);
  EXPECT_DOUBLE_EQ(back->last->duration, 3.25);
  EXPECT_DOUBLE_EQ(back->last->start_time, e.start_time);
  EXPECT_FALSE(decode_position(encode_position({2, std::nullopt}))->last.has_value());
  EXPECT_FALSE(decode_position("not json").has_value());
}

TEST(LauncherStallReport, DdprunNamesTheRankThatStoppedAndTheCollectiveTheOthersWaitedIn) {
  const ddp::testing::TemporaryDirectory logs("ddprun-stall-");
  const std::string dir = logs.string();
  auto r = run_launcher({"--standalone", "--nproc-per-node", "3", "--run-id", "stall", "--log-dir",
                         dir, "--monitor-interval", "0.1", "--stop-grace", "2", DDP_LAUNCH_WORKER,
                         "stall", "1"});
  EXPECT_EQ(r.exit_code, 1) << r.output;
  EXPECT_TRUE(contains(r.output, "[1] stalling after 5 collectives")) << r.output;
  EXPECT_TRUE(contains(r.output,
                       "ddprun: flight recorder: rank 1 stopped after collective #5 "
                       "broadcast(root 0) of 4 float32 (16 B) (completed) while ranks 0, 2 "
                       "waited in collective #6 all_reduce(sum) of 1 int64 (8 B) (timed out "
                       "after 1."))
      << r.output;
  // The rank that timed out printed its ring to its log ...
  EXPECT_TRUE(contains(r.output, "] ddp: flight recorder of rank ")) << r.output;
  EXPECT_TRUE(contains(r.output, "the last 6 collective(s), oldest first")) << r.output;
  EXPECT_TRUE(contains(r.output, "  #6 all_reduce(sum) of 1 int64 (8 B), started ")) << r.output;
  // ... and into its error file, in torchrun's schema.
  int timed_out_files = 0;
  for (int rank : {0, 2}) {
    std::ifstream file(dir + "/stall/attempt_0/" + std::to_string(rank) + "/error.json");
    const nlohmann::json record = nlohmann::json::parse(file, nullptr, false);
    if (!record.is_object()) continue;  // stopped by ddprun before it could record
    const auto& ring = record["message"]["extraInfo"]["flight_recorder"];
    ASSERT_TRUE(ring.is_array()) << record.dump();
    ASSERT_EQ(ring.size(), 6u) << record.dump();
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(ring[i]["sequence"], i + 1);
      EXPECT_EQ(ring[i]["operation"], "all_reduce(sum)");
      EXPECT_EQ(ring[i]["state"], "completed");
    }
    EXPECT_EQ(ring[4]["operation"], "broadcast(root 0)");
    EXPECT_EQ(ring[4]["bytes"], 16);
    if (ring[5]["state"] == "timed out") {
      ++timed_out_files;
      EXPECT_EQ(record["message"]["errorCode"], 5) << "TimeoutError's exit code";
      EXPECT_GE(ring[5]["duration"].get<double>(), 1.4);
    }
  }
  EXPECT_GE(timed_out_files, 1) << "the first rank to fail timed out";
  // The stopped rank never issued #6: its own ring (the file outlives it) ends at #5.
  const auto stopped = flight_recorder::read_file(dir + "/stall/attempt_0/1/flight_recorder.bin");
  ASSERT_TRUE(stopped.has_value());
  EXPECT_EQ(stopped->rank, 1);
  EXPECT_EQ(stopped->world_size, 3);
  ASSERT_EQ(stopped->entries.size(), 5u);
  EXPECT_EQ(stopped->entries.back().state, State::kCompleted);
}

}  // namespace
}  // namespace ddp::launch

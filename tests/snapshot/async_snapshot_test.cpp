// Tests of SnapshotManager::save_async() (Note [An asynchronous save]) in
// one process: the file equals save()'s and resumes bit for bit; the copy
// is taken at the call; keep_last; one save in flight, which save_async(),
// resume() and wait() wait for; a failed background write reported by the
// next call and by wait(), or printed by the destructor; the skip rule; the
// staging buffer reused from save to save.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <string>
#include <vector>

#include "common/error_capture.hpp"
#include "common/models.hpp"
#include "common/temporary_directory.hpp"
#include "ddp/comm/init.hpp"
#include "ddp/snapshot/errors.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"
#include "snapshot/staging_buffer.hpp"

namespace ddp::snapshot {
namespace {

namespace fs = std::filesystem;
using ddp::examples::Mlp;
using ddp::testing::error_of;

bool has(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// The file names in `dir`, sorted.
std::vector<std::string> names_in(const std::string& dir) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(dir)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  return names;
}

// Every tensor record and the scalars record of `a` and `b` equal, bit for bit.
void expect_same_records(const SnapshotFile& a, const SnapshotFile& b) {
  EXPECT_EQ(a.scalars_json, b.scalars_json);
  ASSERT_EQ(a.tensors.size(), b.tensors.size());
  for (const auto& [name, tensor] : a.tensors) {
    ASSERT_EQ(b.tensors.count(name), 1u) << name;
    EXPECT_TRUE(torch::equal(tensor, b.tensors.at(name))) << name;
  }
}

// An MLP trained with SGD (momentum) and a StepLR on random inputs.
struct Program {
  explicit Program(uint64_t seed) : model((torch::manual_seed(seed), Mlp(6, 16, 3))) {
    state.model = model.ptr().get();
    state.optimizer = &optimizer;
    state.scheduler = &scheduler;
  }
  void train(int steps) {
    for (int i = 0; i < steps; ++i) {
      auto x = torch::rand({8, 6}), y = torch::rand({8, 3});
      optimizer.zero_grad();
      torch::mse_loss(model->forward(x), y).backward();
      optimizer.step();
      scheduler.step();
      ++state.counters["global_step"];
    }
  }
  Mlp model;
  torch::optim::SGD optimizer{model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9)};
  torch::optim::StepLR scheduler{optimizer, 3, 0.5};
  TrainingState state;
};

// One 64 MiB parameter: a write long enough to be caught in flight.
struct Large {
  explicit Large(float value) {
    torch::NoGradGuard no_grad;
    linear->weight.fill_(value);
    state.model = linear.ptr().get();
    state.include_rng = false;
  }
  torch::nn::Linear linear{torch::nn::LinearOptions(4096, 4096).bias(false)};
  TrainingState state;
};

float first_weight(const std::string& path) {
  return read_snapshot_file(path).tensors.at("model/param/weight").view(-1)[0].item<float>();
}

class SnapshotAsync : public ::testing::Test {
 protected:
  void SetUp() override { group_ = init(InitOptions(), EnvironmentMap{}); }
  SnapshotOptions options(int keep_last = 3) {
    return SnapshotOptions(dir_.string()).keep_last(keep_last);
  }

  const ddp::testing::TemporaryDirectory dir_{"ddp-snapshot-async-"};
  std::shared_ptr<ProcessGroup> group_;
};

TEST_F(SnapshotAsync, WritesWhatSaveWritesAndResumesBitIdentically) {
  const ddp::testing::TemporaryDirectory sync_dir("ddp-snapshot-sync-");
  Program live(7);
  live.train(5);
  live.state.epoch = 1;
  live.state.metadata["run"] = "async";
  const std::string sync_path = SnapshotManager(sync_dir.string(), group_).save(live.state);
  SnapshotManager snapshots(options(), group_);
  const std::string path = snapshots.save_async(live.state);
  EXPECT_EQ(fs::path(path).filename(), "snapshot-000000000001.ddpsnap");
  live.train(5);  // while the background thread writes
  snapshots.wait();
  EXPECT_FALSE(snapshots.save_in_flight());
  SnapshotFile sync_file = read_snapshot_file(sync_path), async_file = read_snapshot_file(path);
  expect_same_records(sync_file, async_file);

  Program resumed(12345);  // other weights, other RNG
  ASSERT_TRUE(snapshots.resume(resumed.state));
  EXPECT_EQ(resumed.state.counters.at("global_step"), 5);
  resumed.train(5);
  auto expected = live.model->parameters(), got = resumed.model->parameters();
  ASSERT_EQ(expected.size(), got.size());
  for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(torch::equal(expected[i], got[i])) << i;
}

TEST_F(SnapshotAsync, TheCopyIsTakenWhenSaveAsyncIsCalled) {
  Large large(1);
  large.state.counters["step"] = 1;
  large.state.extra_tensors["scale"] = torch::full({4}, 1.0);
  SnapshotManager snapshots(options(), group_);
  const std::string path = snapshots.save_async(large.state);
  {  // what training does next, while the thread writes
    torch::NoGradGuard no_grad;
    large.linear->weight.fill_(2);
    large.state.extra_tensors["scale"].fill_(2);
    large.state.counters["step"] = 2;
  }
  snapshots.wait();
  const SnapshotFile file = read_snapshot_file(path);
  EXPECT_TRUE(file.tensors.at("model/param/weight").eq(1).all().item<bool>());
  EXPECT_TRUE(torch::equal(file.tensors.at("extra/scale"), torch::full({4}, 1.0)));
  EXPECT_TRUE(has(file.scalars_json, "\"step\": 1")) << file.scalars_json;
}

TEST_F(SnapshotAsync, KeepsTheNewestKeepLastAndNoTemporaryFiles) {
  Program program(3);
  SnapshotManager snapshots(options(/*keep_last=*/2), group_);
  std::vector<std::string> paths;
  for (int i = 0; i < 5; ++i) {
    program.train(1);
    paths.push_back(snapshots.save_async(program.state));
  }
  snapshots.wait();
  EXPECT_EQ(snapshots.list(), (std::vector<std::string>{paths[4], paths[3]}));
  EXPECT_EQ(names_in(dir_.string()), (std::vector<std::string>{"snapshot-000000000004.ddpsnap",
                                                               "snapshot-000000000005.ddpsnap"}));
}

// At most one save in flight: the next save_async() returns only once the
// previous file is complete, and resume() waits for the write too.
TEST_F(SnapshotAsync, OneSaveInFlightWhichTheNextSaveAndResumeWaitFor) {
  Large large(1), fresh(0);
  SnapshotManager snapshots(options(), group_);
  const std::string first = snapshots.save_async(large.state);
  EXPECT_FALSE(fs::exists(first));
  ASSERT_TRUE(snapshots.save_in_flight()) << "the 64 MiB write ended before save_async returned";
  {
    torch::NoGradGuard no_grad;
    large.linear->weight.fill_(2);
  }
  const std::string second = snapshots.save_async(large.state);
  EXPECT_EQ(first_weight(first), 1);  // complete when the second save began

  ASSERT_TRUE(snapshots.resume(fresh.state));  // waits for the second
  EXPECT_FALSE(snapshots.save_in_flight());
  EXPECT_TRUE(fresh.linear->weight.eq(2).all().item<bool>());
  EXPECT_EQ(snapshots.list(), (std::vector<std::string>{second, first}));
}

// A directory where the background thread's temporary file must go stops
// the write for root too.
void block_write(const std::string& dir, int sequence) {
  char name[64];
  std::snprintf(name, sizeof name, ".snapshot-%012d.ddpsnap.tmp", sequence);
  fs::create_directories(fs::path(dir) / name / "blocker");
}

TEST_F(SnapshotAsync, AFailedBackgroundWriteIsReportedByTheNextCallAndByWait) {
  Program program(5);
  SnapshotManager snapshots(options(), group_);
  const std::string first = snapshots.save_async(program.state);
  snapshots.wait();
  block_write(dir_.string(), 2);
  const std::string blocked = dir_.file(".snapshot-000000000002.ddpsnap.tmp");
  EXPECT_EQ(snapshots.save_async(program.state), dir_.file("snapshot-000000000002.ddpsnap"));
  std::string message =
      error_of<SnapshotError>([&] { snapshots.save_async(program.state); });  // starts nothing
  EXPECT_TRUE(has(message, "cannot write snapshot " + blocked)) << message;
  EXPECT_TRUE(has(message, "Is a directory")) << message;
  EXPECT_FALSE(snapshots.save_in_flight());
  EXPECT_EQ(snapshots.list(), std::vector<std::string>{first});

  fs::remove_all(blocked);  // the cause gone, the next save succeeds
  const std::string second = snapshots.save_async(program.state);
  snapshots.wait();
  EXPECT_EQ(snapshots.list(), (std::vector<std::string>{second, first}));

  block_write(dir_.string(), 3);
  snapshots.save_async(program.state);
  message = error_of<SnapshotError>([&] { snapshots.wait(); });
  EXPECT_TRUE(
      has(message, "cannot write snapshot " + dir_.file(".snapshot-000000000003.ddpsnap.tmp")))
      << message;
  snapshots.wait();  // reported once: nothing left
  Program resumed(99);
  EXPECT_TRUE(snapshots.resume(resumed.state));
  EXPECT_EQ(resumed.state.counters, program.state.counters);
}

TEST_F(SnapshotAsync, ADestroyedManagerPrintsAFailureNothingReported) {
  Program program(5);
  block_write(dir_.string(), 1);
  ::testing::internal::CaptureStderr();
  {
    SnapshotManager snapshots(options(), group_);
    snapshots.save_async(program.state);
  }
  const std::string printed = ::testing::internal::GetCapturedStderr();
  EXPECT_TRUE(has(printed, "the asynchronous save of " +
                               dir_.file("snapshot-000000000001.ddpsnap") + " failed"))
      << printed;
  EXPECT_TRUE(has(printed, dir_.file(".snapshot-000000000001.ddpsnap.tmp"))) << printed;

  ::testing::internal::CaptureStderr();
  {
    SnapshotManager snapshots(options(), group_);
    snapshots.save_async(program.state);
    EXPECT_THROW(snapshots.wait(), SnapshotError);
  }
  EXPECT_EQ(::testing::internal::GetCapturedStderr(), "");  // reported, not printed again
}

TEST_F(SnapshotAsync, SkipWhileWritingSavesNothingWhileTheWriteRuns) {
  Large large(1);
  SnapshotManager snapshots(options().skip_while_writing(true), group_);
  const std::string first = snapshots.save_async(large.state);
  ASSERT_TRUE(snapshots.save_in_flight()) << "the 64 MiB write ended before save_async returned";
  EXPECT_EQ(snapshots.save_async(large.state), "");
  snapshots.wait();
  const std::string second = snapshots.save_async(large.state);
  snapshots.wait();
  EXPECT_EQ(snapshots.list(), (std::vector<std::string>{second, first}));
}

TEST(SnapshotStaging, ASteadyStateStageReusesItsBuffersAndCopies) {
  detail::StagingBuffer staging;
  at::Tensor a = torch::arange(6, torch::kFloat).reshape({2, 3}),
             b = torch::ones({4}, torch::kLong);
  const detail::NamedTensors records = {{"a", a.t()}, {"b", b}};  // a non-contiguous view
  detail::NamedTensors first = staging.stage(records);
  EXPECT_EQ(staging.allocations(), 2);
  EXPECT_EQ(staging.bytes(), 6 * 4 + 4 * 8);
  a.fill_(-1);  // the copy does not alias the live tensor
  EXPECT_TRUE(torch::equal(first[0].second, torch::arange(6, torch::kFloat).reshape({2, 3}).t()));
  EXPECT_TRUE(first[0].second.is_contiguous());

  detail::NamedTensors second = staging.stage(records);
  EXPECT_EQ(staging.allocations(), 2);  // nothing new
  EXPECT_EQ(second[0].second.data_ptr(), first[0].second.data_ptr());
  EXPECT_TRUE(torch::equal(second[0].second, a.t()));

  staging.stage({{"a", torch::zeros({3, 3})}});  // another shape; b dropped
  EXPECT_EQ(staging.allocations(), 3);
  EXPECT_EQ(staging.bytes(), 9 * 4);
  EXPECT_TRUE(has(error_of<SnapshotError>([&] {
                    staging.stage({{"sparse", torch::eye(2).to_sparse()}});
                  }),
                  "tensor 'sparse' is not a dense tensor"));
}

}  // namespace
}  // namespace ddp::snapshot

// Tests of training-state snapshots: bit-exact round trips of model,
// optimizer, scheduler, RNG and user state; bit-exact continuation after a
// restart; retention; corrupt, truncated, foreign and half-written files.
// Every test uses a group of one process and its own temporary directory.

#include <ATen/CPUGeneratorImpl.h>
#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "base/compat/torch_compat.hpp"
#include "common/error_capture.hpp"
#include "common/models.hpp"
#include "common/temporary_directory.hpp"
#include "ddp/comm/init.hpp"
#include "ddp/launch/child_process.hpp"
#include "ddp/launch/port_reservation.hpp"
#include "ddp/snapshot/errors.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"
#include "snapshot/optimizer_state.hpp"

namespace fs = std::filesystem;
using ddp::examples::ConvNet;
using ddp::examples::Mlp;
using ddp::testing::error_of;
using Bytes = std::vector<char>;

namespace {

Bytes read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return Bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_bytes(const std::string& path, const Bytes& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc).write(bytes.data(), bytes.size());
}

bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// `steps` SGD-style steps of an MLP(6 -> 3) on random data.
void train_mlp(Mlp& model, torch::optim::Optimizer& optimizer, int steps,
               torch::optim::LRScheduler* scheduler = nullptr) {
  for (int i = 0; i < steps; ++i) {
    auto x = torch::rand({8, 6}), y = torch::rand({8, 3});
    optimizer.zero_grad();
    torch::mse_loss(model->forward(x), y).backward();
    optimizer.step();
    if (scheduler) scheduler->step();
  }
}

// Every parameter and buffer of `a` and `b` bit-identical.
void expect_modules_equal(torch::nn::Module& a, torch::nn::Module& b) {
  for (bool parameters : {true, false}) {
    auto ta = parameters ? a.named_parameters() : a.named_buffers();
    auto tb = parameters ? b.named_parameters() : b.named_buffers();
    ASSERT_EQ(ta.size(), tb.size());
    for (const auto& item : ta)
      EXPECT_TRUE(torch::equal(item.value(), tb[item.key()])) << item.key();
  }
}

// A training state pointing at the given objects.
ddp::snapshot::TrainingState bound(torch::nn::Module& model,
                                   torch::optim::Optimizer* optimizer = nullptr,
                                   torch::optim::LRScheduler* scheduler = nullptr) {
  ddp::snapshot::TrainingState state;
  state.model = &model;
  state.optimizer = optimizer;
  state.scheduler = scheduler;
  return state;
}

// The state of parameter `i` of group 0.
template <typename S>
const S& param_state(const torch::optim::Optimizer& optimizer, size_t i) {
  const auto& p = optimizer.param_groups()[0].params()[i];
  return static_cast<const S&>(*optimizer.state().at(ddp::compat::optimizer_state_key(p)));
}

class SnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override { group_ = ddp::init(ddp::InitOptions(), ddp::EnvironmentMap{}); }

  ddp::snapshot::SnapshotManager manager(int keep_last = 3) {
    return ddp::snapshot::SnapshotManager(ddp::snapshot::SnapshotOptions(dir_).keep_last(keep_last),
                                          group_);
  }
  // Saves an MLP state with counters["global_step"] = step; returns the path.
  std::string save_mlp_at(int64_t step) {
    torch::manual_seed(step);
    Mlp model(6, 16, 3);
    torch::optim::SGD optimizer(model->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    train_mlp(model, optimizer, 2);
    ddp::snapshot::TrainingState state = bound(*model, &optimizer);
    state.counters["global_step"] = step;
    return manager().save(state);
  }
  int64_t resumed_step() {
    Mlp model(6, 16, 3);
    ddp::snapshot::TrainingState state = bound(*model);
    EXPECT_TRUE(manager().resume(state));
    return state.counters["global_step"];
  }

  const ddp::testing::TemporaryDirectory temporary_{"ddp-snapshot-"};
  const std::string dir_ = temporary_.string();
  std::shared_ptr<ddp::ProcessGroup> group_;
};

TEST_F(SnapshotTest, RoundTripMlpSgdMomentumStepLrRngAndUserState) {
  torch::manual_seed(1);
  Mlp model(6, 16, 3);
  torch::optim::SGD optimizer(model->parameters(),
                              torch::optim::SGDOptions(0.1).momentum(0.9).nesterov(true));
  torch::optim::StepLR scheduler(optimizer, /*step_size=*/2, /*gamma=*/0.5);
  train_mlp(model, optimizer, 5, &scheduler);
  ddp::snapshot::TrainingState saved = bound(*model, &optimizer, &scheduler);
  saved.epoch = 3;
  saved.step_in_epoch = 7;
  saved.counters = {{"global_step", 5}, {"sampler_offset", 40}};
  saved.metadata = {{"run", "abc"}, {"note", "x=1; y=\"2\""}};
  saved.extra_tensors = {{"scale", torch::full({1}, 65536.0)},
                         {"growth", torch::tensor({3}, torch::kInt)}};
  std::string path = manager().save(saved);
  EXPECT_EQ(fs::path(path).filename(), "snapshot-000000000001.ddpsnap");
  at::Tensor expected_draws = torch::rand({5});

  torch::manual_seed(99);
  Mlp fresh(6, 16, 3);
  torch::optim::SGD fresh_optimizer(fresh->parameters(),
                                    torch::optim::SGDOptions(1.0).momentum(0.9));
  torch::optim::StepLR fresh_scheduler(fresh_optimizer, 2, 0.5);
  ASSERT_FALSE(torch::equal(model->fc1->weight, fresh->fc1->weight));
  at::Tensor scale_alias = torch::zeros({1});
  ddp::snapshot::TrainingState state = bound(*fresh, &fresh_optimizer, &fresh_scheduler);
  state.extra_tensors = {{"scale", scale_alias}, {"stale", torch::ones({2})}};
  ASSERT_TRUE(manager().resume(state));

  EXPECT_TRUE(torch::equal(torch::rand({5}), expected_draws));  // RNG restored
  expect_modules_equal(*model, *fresh);
  for (size_t i = 0; i < model->parameters().size(); ++i) {
    EXPECT_TRUE(torch::equal(
        param_state<torch::optim::SGDParamState>(optimizer, i).momentum_buffer(),
        param_state<torch::optim::SGDParamState>(fresh_optimizer, i).momentum_buffer()));
  }
  const auto& want =
      static_cast<const torch::optim::SGDOptions&>(optimizer.param_groups()[0].options());
  const auto& got =
      static_cast<const torch::optim::SGDOptions&>(fresh_optimizer.param_groups()[0].options());
  EXPECT_EQ(want.lr(), 0.1 * 0.5 * 0.5);  // StepLR changed it twice in 5 steps
  EXPECT_TRUE(want == got);
  EXPECT_EQ(ddp::snapshot::detail::scheduler_step_count(fresh_scheduler), 5u);
  for (int i = 0; i < 2; ++i) scheduler.step(), fresh_scheduler.step();  // step 7 halves the rate
  EXPECT_EQ(want.lr(), got.lr());
  EXPECT_EQ(got.lr(), 0.1 * 0.125);
  EXPECT_EQ(state.epoch, 3);
  EXPECT_EQ(state.step_in_epoch, 7);
  EXPECT_EQ(state.counters, saved.counters);
  EXPECT_EQ(state.metadata, saved.metadata);
  ASSERT_EQ(state.extra_tensors.size(), 2u);  // "stale" is gone: keys are the snapshot's
  EXPECT_TRUE(torch::equal(state.extra_tensors.at("scale"), saved.extra_tensors.at("scale")));
  EXPECT_TRUE(torch::equal(state.extra_tensors.at("growth"), saved.extra_tensors.at("growth")));
  EXPECT_EQ(scale_alias.item<float>(), 65536.0f);  // overwritten in place
}

TEST_F(SnapshotTest, RoundTripConvNetBatchNormBuffersAndAdam) {
  torch::manual_seed(2);
  ConvNet model;
  torch::optim::Adam optimizer(model->parameters(),
                               torch::optim::AdamOptions(1e-3).amsgrad(true).betas({0.8, 0.95}));
  for (int i = 0; i < 3; ++i) {
    optimizer.zero_grad();
    auto logits = model->forward(torch::rand({4, 1, 28, 28}));
    torch::nn::functional::cross_entropy(logits, torch::randint(10, {4})).backward();
    optimizer.step();
  }
  manager().save(bound(*model, &optimizer));

  torch::manual_seed(3);
  ConvNet fresh;
  torch::optim::Adam fresh_optimizer(fresh->parameters(), torch::optim::AdamOptions(5e-2));
  ddp::snapshot::TrainingState state = bound(*fresh, &fresh_optimizer);
  ASSERT_TRUE(manager().resume(state));

  expect_modules_equal(*model, *fresh);  // includes running_mean/var, num_batches_tracked
  EXPECT_EQ(fresh->named_buffers()["layer1.1.num_batches_tracked"].item<int64_t>(), 3);
  using S = torch::optim::AdamParamState;
  for (size_t i = 0; i < model->parameters().size(); ++i) {
    const S& a = param_state<S>(optimizer, i);
    const S& b = param_state<S>(fresh_optimizer, i);
    EXPECT_EQ(a.step(), b.step());
    EXPECT_TRUE(torch::equal(a.exp_avg(), b.exp_avg()));
    EXPECT_TRUE(torch::equal(a.exp_avg_sq(), b.exp_avg_sq()));
    EXPECT_TRUE(torch::equal(a.max_exp_avg_sq(), b.max_exp_avg_sq()));
  }
  EXPECT_TRUE(
      static_cast<const torch::optim::AdamOptions&>(optimizer.param_groups()[0].options()) ==
      static_cast<const torch::optim::AdamOptions&>(fresh_optimizer.param_groups()[0].options()));
}

// Save, go on 3 steps; a fresh program resumes and goes on 3 steps alike.
TEST_F(SnapshotTest, EveryOptimizerContinuesBitExactly) {
  using Optimizer = std::unique_ptr<torch::optim::Optimizer>;
  std::vector<std::function<Optimizer(Mlp&)>> optimizers = {
      [](Mlp& m) { return std::make_unique<torch::optim::Adam>(m->parameters()); },
      [](Mlp& m) { return std::make_unique<torch::optim::AdamW>(m->parameters()); },
      [](Mlp& m) {
        return std::make_unique<torch::optim::RMSprop>(
            m->parameters(), torch::optim::RMSpropOptions(1e-2).momentum(0.5).centered(true));
      },
      [](Mlp& m) { return std::make_unique<torch::optim::Adagrad>(m->parameters()); }};
  for (const auto& make : optimizers) {
    SCOPED_TRACE(&make - optimizers.data());
    torch::manual_seed(4);
    Mlp model(6, 16, 3);
    auto optimizer = make(model);
    train_mlp(model, *optimizer, 3);
    manager().save(bound(*model, optimizer.get()));
    train_mlp(model, *optimizer, 3);
    torch::manual_seed(5);
    Mlp fresh(6, 16, 3);
    auto fresh_optimizer = make(fresh);
    ddp::snapshot::TrainingState state = bound(*fresh, fresh_optimizer.get());
    ASSERT_TRUE(manager().resume(state));
    train_mlp(fresh, *fresh_optimizer, 3);
    expect_modules_equal(*model, *fresh);
  }
}

// A training program: an MLP from `seed`, SGD with momentum, a StepLR.
struct Program {
  explicit Program(uint64_t seed) : model((torch::manual_seed(seed), Mlp(6, 16, 3))) {}
  Mlp model;
  torch::optim::SGD optimizer{model->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9)};
  torch::optim::StepLR scheduler{optimizer, 3, 0.5};
  ddp::snapshot::TrainingState state = bound(*model, &optimizer, &scheduler);
};

TEST_F(SnapshotTest, ContinuationAfterRestartIsBitIdentical) {
  auto run = [&](bool interrupt) {
    auto program = std::make_unique<Program>(7);
    EXPECT_FALSE(manager().resume(program->state));
    for (int64_t step = 0; step < 10; ++step) {
      train_mlp(program->model, program->optimizer, 1, &program->scheduler);
      program->state.counters["global_step"] = step + 1;
      if (interrupt && step == 4) {
        manager().save(program->state);
        program = std::make_unique<Program>(12345);  // "killed", restarted: other weights and RNG
        EXPECT_TRUE(manager().resume(program->state));
        step = program->state.counters.at("global_step") - 1;
      }
    }
    fs::remove_all(dir_);
    return program->model->parameters();
  };
  auto straight = run(false), resumed = run(true);
  ASSERT_EQ(straight.size(), resumed.size());
  for (size_t i = 0; i < straight.size(); ++i)
    EXPECT_TRUE(torch::equal(straight[i], resumed[i])) << i;
}

TEST_F(SnapshotTest, KeepsTheNewestKeepLastAndNoTemporaryFiles) {
  std::vector<std::string> paths;
  for (int step = 1; step <= 5; ++step) {
    torch::manual_seed(step);
    Mlp model(6, 16, 3);
    paths.push_back(manager(/*keep_last=*/2).save(bound(*model)));
  }
  EXPECT_EQ(manager(2).list(), (std::vector<std::string>{paths[4], paths[3]}));
  std::vector<std::string> names;  // and nothing else, no temporary files
  for (const auto& entry : fs::directory_iterator(dir_)) names.push_back(entry.path().filename());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"snapshot-000000000004.ddpsnap",
                                             "snapshot-000000000005.ddpsnap"}));
}

TEST_F(SnapshotTest, CorruptNewestIsSkippedWithAWarningNamingIt) {
  struct Damage {
    const char* name;
    const char* expected;
    std::function<void(Bytes&)> apply;
  };
  std::vector<Damage> damages = {
      {"flipped payload byte", "payload is corrupt", [](Bytes& b) { b[b.size() / 2] ^= 0x5a; }},
      {"flipped header byte", "header is corrupt", [](Bytes& b) { b[17] ^= 0x01; }},
      {"truncated", "truncated", [](Bytes& b) { b.resize(b.size() / 2); }},
      {"no end marker", "no end marker",
       [](Bytes& b) { std::memset(b.data() + b.size() - 8, 0, 8); }},
  };
  for (const auto& damage : damages) {
    SCOPED_TRACE(damage.name);
    fs::remove_all(dir_);
    save_mlp_at(1);
    std::string newest = save_mlp_at(2);
    Bytes bytes = read_bytes(newest);
    damage.apply(bytes);
    write_bytes(newest, bytes);
    testing::internal::CaptureStderr();
    EXPECT_EQ(resumed_step(), 1);
    std::string warnings = testing::internal::GetCapturedStderr();
    EXPECT_TRUE(contains(warnings, newest)) << warnings;
    EXPECT_TRUE(contains(warnings, damage.expected)) << warnings;
    EXPECT_TRUE(
        contains(error_of<ddp::SnapshotError>([&] { ddp::snapshot::read_snapshot_file(newest); }),
                 damage.expected));
  }
}

TEST_F(SnapshotTest, AFileThatIsNotASnapshotIsAClearError) {
  std::string random = dir_ + "/random.bin", empty = dir_ + "/empty.bin";
  std::mt19937 rng(1);
  Bytes noise(1000);
  for (char& c : noise) c = static_cast<char>(rng());
  write_bytes(random, noise);
  write_bytes(empty, {});
  for (const auto& path : {random, empty}) {
    std::string message =
        error_of<ddp::SnapshotError>([&] { ddp::snapshot::read_snapshot_file(path); });
    EXPECT_TRUE(contains(message, path)) << message;
    EXPECT_TRUE(contains(message, "is not a ddp snapshot")) << message;
  }
  EXPECT_TRUE(contains(
      error_of<ddp::SnapshotError>([&] { ddp::snapshot::read_snapshot_file(dir_ + "/missing"); }),
      "cannot open"));
}

TEST_F(SnapshotTest, AnotherModelIsRejectedNamingTheFirstMismatchAndLeftUntouched) {
  std::string path = save_mlp_at(1);
  torch::manual_seed(9);
  Mlp other(6, 32, 3);  // fc1.weight is [32, 6], not [16, 6]
  at::Tensor before = other->fc1->weight.clone();
  ddp::snapshot::TrainingState state = bound(*other);
  std::string message = error_of<ddp::SnapshotError>([&] { manager().resume(state); });
  EXPECT_TRUE(contains(message, path)) << message;
  EXPECT_TRUE(
      contains(message, "'fc1.weight' is [16, 6] float32 in the snapshot but [32, 6] float32"))
      << message;
  EXPECT_TRUE(torch::equal(before, other->fc1->weight));
  EXPECT_TRUE(state.counters.empty());

  Mlp same(6, 16, 3);  // right model, but Adam where the snapshot has SGD
  torch::optim::Adam adam(same->parameters());
  state.model = same.ptr().get();
  state.optimizer = &adam;
  at::Tensor same_before = same->fc1->weight.clone();
  message = error_of<ddp::SnapshotError>([&] {
    ddp::snapshot::restore_training_state(ddp::snapshot::read_snapshot_file(path), state);
  });
  EXPECT_TRUE(contains(message, "of type sgd, this one is adam")) << message;
  EXPECT_TRUE(torch::equal(same_before, same->fc1->weight));

  torch::optim::LBFGS lbfgs(same->parameters());
  state.optimizer = &lbfgs;
  EXPECT_TRUE(contains(error_of<ddp::SnapshotError>([&] { manager().save(state); }),
                       "torch::optim::LBFGS"));
  EXPECT_EQ(manager().list().size(), 1u);  // nothing new written
}

// Note [Resuming at another world size]: the saved states cannot map rank
// for rank, so each rank's generators are seeded from rank 0's saved CPU
// state and its rank; at the same world size the saved state returns.
TEST_F(SnapshotTest, AnotherWorldSizeDerivesEachRanksGeneratorsAndKeepsTheGlobalPosition) {
  torch::manual_seed(11);
  Mlp model(6, 16, 3);
  ddp::snapshot::TrainingState saved = bound(*model);
  saved.samples_in_epoch = 640;
  const std::string path = manager().save(saved);  // world size 1
  const at::Tensor next_draws = torch::rand({4});
  const ddp::snapshot::SnapshotFile file = ddp::snapshot::read_snapshot_file(path);
  const at::Tensor rank0_state = file.tensors.at("rng/rank0/cpu");

  std::vector<at::Tensor> draws;
  for (int rank : {0, 1, 2}) {
    torch::manual_seed(99);  // whatever the process drew before resuming
    ddp::snapshot::TrainingState state = bound(*model);
    ddp::snapshot::restore_training_state(file, state, rank, /*world_size=*/3);
    EXPECT_EQ(state.samples_in_epoch, 640);
    EXPECT_EQ(at::detail::getDefaultCPUGenerator().current_seed(),
              ddp::snapshot::derived_rng_seed(rank0_state, rank));
    draws.push_back(torch::rand({4}));
    // Deterministic: the same snapshot, rank and world size draw the same.
    ddp::snapshot::restore_training_state(file, state, rank, 3);
    EXPECT_TRUE(torch::equal(torch::rand({4}), draws.back())) << "rank " << rank;
  }
  EXPECT_FALSE(torch::equal(draws[0], draws[1]));
  EXPECT_FALSE(torch::equal(draws[1], draws[2]));
  EXPECT_NE(ddp::snapshot::derived_rng_seed(rank0_state, 1),
            ddp::snapshot::derived_rng_seed(torch::zeros_like(rank0_state), 1));
  // The same world size restores the saved stream itself.
  ddp::snapshot::TrainingState state = bound(*model);
  ddp::snapshot::restore_training_state(file, state, 0, /*world_size=*/1);
  EXPECT_TRUE(torch::equal(torch::rand({4}), next_draws));
}

TEST_F(SnapshotTest, FileLayoutHeaderRecordsAndEndMarker) {
  std::string path = save_mlp_at(42);
  Bytes bytes = read_bytes(path);
  ASSERT_GT(bytes.size(), 72u);
  EXPECT_EQ(std::string(bytes.data(), 8), "DDPSNAP1");
  auto u32 = [&](size_t offset) {
    uint32_t v;
    std::memcpy(&v, bytes.data() + offset, 4);
    return v;
  };
  EXPECT_EQ(u32(8), 1u);    // format version
  EXPECT_EQ(u32(12), 64u);  // header size
  EXPECT_EQ(u32(16), 1u);   // world size
  EXPECT_EQ(std::string(bytes.data() + bytes.size() - 8, 8), "DDPSEND1");
  ddp::snapshot::SnapshotFile file = ddp::snapshot::read_snapshot_file(path);
  EXPECT_EQ(file.sequence, 1u);
  EXPECT_EQ(file.world_size, 1u);
  for (const char* name :
       {"model/param/fc1.weight", "model/param/fc3.bias", "optim/g0/p0/momentum_buffer",
        "optim/g0/p5/momentum_buffer", "rng/rank0/cpu"}) {
    EXPECT_EQ(file.tensors.count(name), 1u) << name;
  }
  EXPECT_TRUE(contains(file.scalars_json, "\"global_step\": 42")) << file.scalars_json;
}

TEST_F(SnapshotTest, LeftoverTemporaryFileOfAKilledWriterIsIgnored) {
  std::string intact = save_mlp_at(1);
  std::string second = save_mlp_at(2);
  // As if the writer of snapshot 2 died before its rename.
  Bytes partial = read_bytes(second);
  partial.resize(partial.size() / 3);
  fs::remove(second);
  std::string temp = dir_ + "/.snapshot-000000000002.ddpsnap.tmp";
  write_bytes(temp, partial);
  EXPECT_EQ(manager().list(), std::vector<std::string>{intact});
  testing::internal::CaptureStderr();
  EXPECT_EQ(resumed_step(), 1);
  EXPECT_EQ(testing::internal::GetCapturedStderr(), "");
  save_mlp_at(3);  // the next save cleans the leftover up
  EXPECT_FALSE(fs::exists(temp));
}

TEST_F(SnapshotTest, EmptyOrMissingDirectoryResumesNothing) {
  Mlp model(6, 16, 3);
  at::Tensor before = model->fc1->weight.clone();
  ddp::snapshot::TrainingState state = bound(*model);
  EXPECT_FALSE(manager().resume(state));
  fs::remove_all(dir_);
  EXPECT_FALSE(manager().resume(state));
  EXPECT_TRUE(manager().list().empty());
  EXPECT_TRUE(torch::equal(before, model->fc1->weight));
}

// Two ranks (threads of this process, over Gloo): rank 0 writes the file
// (with both ranks' RNG states), both resume from it; ranks that see
// different directories fail together instead of diverging.
TEST_F(SnapshotTest, TwoRanksSaveOnRankZeroAndResumeTogether) {
  const ddp::launch::PortReservation reserved;
  const int port = reserved.port();
  std::string paths[2], errors[2];
  at::Tensor weights[2];
  auto rank_main = [&](int rank) {
    try {
      ddp::EnvironmentMap env = {{"RANK", std::to_string(rank)},
                                 {"WORLD_SIZE", "2"},
                                 {"MASTER_ADDR", "127.0.0.1"},
                                 {"MASTER_PORT", std::to_string(port)}};
      auto group = ddp::init(ddp::InitOptions().backend("gloo"), env);
      ddp::snapshot::SnapshotManager snapshots(ddp::snapshot::SnapshotOptions(dir_), group);
      Mlp model(6, 16, 3), fresh(6, 16, 3);
      ddp::snapshot::TrainingState state = bound(*model);
      state.counters["rank"] = rank;
      paths[rank] = snapshots.save(state);
      ddp::snapshot::TrainingState resumed = bound(*fresh);
      EXPECT_TRUE(snapshots.resume(resumed));
      EXPECT_EQ(resumed.counters["rank"], 0);
      weights[rank] = fresh->fc1->weight.clone();
      ddp::snapshot::SnapshotManager split(
          ddp::snapshot::SnapshotOptions(dir_ + (rank ? "/elsewhere" : "")), group);
      errors[rank] = error_of<ddp::SnapshotError>([&] { split.resume(resumed); });
    } catch (const std::exception& e) {
      ADD_FAILURE() << "rank " << rank << ": " << e.what();
    }
  };
  std::thread other(rank_main, 1);
  rank_main(0);
  other.join();
  EXPECT_EQ(paths[0], paths[1]);
  ASSERT_TRUE(weights[0].defined() && weights[1].defined());
  EXPECT_TRUE(torch::equal(weights[0], weights[1]));
  ddp::snapshot::SnapshotFile file = ddp::snapshot::read_snapshot_file(paths[0]);
  EXPECT_EQ(file.world_size, 2u);
  EXPECT_EQ(file.tensors.count("rng/rank0/cpu") + file.tensors.count("rng/rank1/cpu"), 2u);
  for (const auto& error : errors) EXPECT_TRUE(contains(error, "ranks disagree")) << error;
}

TEST_F(SnapshotTest, OptionsAreValidated) {
  EXPECT_THROW(ddp::snapshot::SnapshotManager(ddp::snapshot::SnapshotOptions(""), group_),
               ddp::ConfigError);
  EXPECT_THROW(
      ddp::snapshot::SnapshotManager(ddp::snapshot::SnapshotOptions(dir_).keep_last(0), group_),
      ddp::ConfigError);
  EXPECT_THROW(
      ddp::snapshot::SnapshotManager(ddp::snapshot::SnapshotOptions(dir_).prefix("a/b"), group_),
      ddp::ConfigError);
  EXPECT_THROW(
      ddp::snapshot::SnapshotManager(ddp::snapshot::SnapshotOptions(dir_).prefix(".x"), group_),
      ddp::ConfigError);
  EXPECT_THROW(ddp::snapshot::SnapshotManager(ddp::snapshot::SnapshotOptions(dir_), nullptr),
               ddp::ConfigError);
}

}  // namespace

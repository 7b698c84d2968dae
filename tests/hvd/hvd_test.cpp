// The Horovod-style API: DistributedOptimizer with N = 2 and 3 real
// processes against one process on the concatenated batch (with and without
// fusion, accumulation, fp16 compression, sum), the start-up broadcasts,
// rank queries and errors; learning-rate scaling and option checks in this
// process with a group of one.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "common/expect_checks.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/hvd.hpp"
#include "hvd/hvd_checks.hpp"
#include "multiprocess/harness.hpp"

namespace ddp::testing {
namespace {

struct TrainingCase {
  std::string name;
  int world;
  std::vector<std::string> flags;
};

class HvdTraining : public ::testing::TestWithParam<TrainingCase> {};

TEST_P(HvdTraining, MatchesOneProcessOnTheConcatenatedBatch) {
  const auto& param = GetParam();
  std::vector<std::string> args{"train"};
  args.insert(args.end(), param.flags.begin(), param.flags.end());
  auto results = run_ranks(param.world, args);
  expect_checks(results, hvd_check::training_check_names(fusion_threshold_of(param.flags)));
}

INSTANTIATE_TEST_SUITE_P(
    Hvd, HvdTraining,
    ::testing::Values(
        TrainingCase{"N2_Fused", 2, {}}, TrainingCase{"N3_Fused", 3, {}},
        TrainingCase{"N2_NoFusion", 2, {"--fusion", "0"}},
        TrainingCase{"N3_NoFusion", 3, {"--fusion", "0"}},
        TrainingCase{"N3_SmallBuffers", 3, {"--fusion", "300"}},
        TrainingCase{"N2_TwoPassesSummed", 2, {"--passes", "2"}},
        TrainingCase{"N3_TwoPassesAveraged", 3, {"--passes", "2", "--average-aggregated"}},
        TrainingCase{"N2_Fp16", 2, {"--fp16"}},
        TrainingCase{"N3_Fp16NoFusion", 3, {"--fp16", "--fusion", "0"}},
        TrainingCase{"N3_Sum", 3, {"--sum"}},
        // The shared-memory backend underneath, unchanged API.
        TrainingCase{"N3_FusedOnShm", 3, {"--backend", "shm"}},
        TrainingCase{"N2_Fp16NoFusionOnShm", 2, {"--fp16", "--fusion", "0", "--backend", "shm"}}),
    [](const auto& info) { return info.param.name; });

class HvdBroadcast : public ::testing::TestWithParam<int> {};

TEST_P(HvdBroadcast, EveryRankEndsWithRankZerosModelAndOptimizer) {
  const int world = GetParam();
  auto results = run_ranks(world, {"broadcast-state"});
  expect_checks(results, hvd_check::broadcast_check_names());
}

INSTANTIATE_TEST_SUITE_P(Hvd, HvdBroadcast, ::testing::Values(2, 3),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

TEST(HvdApi, RankSizeLocalRankLocalSize) {
  auto results = run_ranks(3, {"api"});
  expect_checks(results, hvd_check::api_check_names());
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_NE(results[rank].output.find("before init: hvd::process_group() needs a process group, "
                                        "and hvd::init() has not been called"),
              std::string::npos)
        << describe(results);
  }
}

TEST(HvdApi, DifferentOptimizerTypesFailOnEveryRankWithoutHanging) {
  auto results = run_ranks(3, {"mismatch"}, torchrun_environment, std::chrono::seconds(60));
  for (int rank = 0; rank < 3; ++rank) {
    EXPECT_FALSE(results[rank].killed_at_deadline) << describe(results);
    EXPECT_EQ(results[rank].exit_code, static_cast<int>(ExitCode::kInvalidArgument))
        << describe(results);
  }
  EXPECT_NE(results[1].output.find("hvd::broadcast_optimizer_state on rank 1: the snapshot holds "
                                   "the state of an optimizer of type adam, this one is sgd"),
            std::string::npos)
      << describe(results);
  EXPECT_NE(results[0].output.find("hvd::broadcast_optimizer_state: rank 1 could not take part"),
            std::string::npos)
      << describe(results);
}

// Uneven inputs: ranks with 3, 5 and 8 steps under ddp::Join, fused and
// one all-reduce per gradient, averaged over the world size or over the
// ranks that contributed.
TEST(HvdJoin, UnevenStepsMatchOneProcessAndEndTogether) {
  for (const std::vector<std::string>& extra :
       {std::vector<std::string>{}, {"--fusion", "0", "--by-contributors"}}) {
    std::vector<std::string> args = {"join"};
    args.insert(args.end(), extra.begin(), extra.end());
    auto results = run_ranks(3, args);
    expect_checks(results, hvd_check::join_check_names());
  }
}

TEST(HvdLearningRate, LinearWarmupFromTheBaseRateToSizeTimesIt) {
  EXPECT_DOUBLE_EQ(hvd::scaled_learning_rate(0.1, 4, 0, 10), 0.1);
  EXPECT_DOUBLE_EQ(hvd::scaled_learning_rate(0.1, 4, 5, 10), 0.1 * (1 + 3 * 0.5));
  EXPECT_DOUBLE_EQ(hvd::scaled_learning_rate(0.1, 4, 10, 10), 0.4);
  EXPECT_DOUBLE_EQ(hvd::scaled_learning_rate(0.1, 4, 99, 10), 0.4);
  EXPECT_DOUBLE_EQ(hvd::scaled_learning_rate(0.1, 4, 0, 0), 0.4);
  EXPECT_THROW(hvd::scaled_learning_rate(0.1, 0, 1, 10), ConfigError);
  EXPECT_THROW(hvd::scaled_learning_rate(0.1, 2, -1, 10), ConfigError);

  torch::Tensor a = torch::zeros({2}, torch::requires_grad());
  torch::Tensor b = torch::zeros({2}, torch::requires_grad());
  torch::optim::SGD sgd(
      {torch::optim::OptimizerParamGroup({a}),
       torch::optim::OptimizerParamGroup({b}, std::make_unique<torch::optim::SGDOptions>(0.5))},
      torch::optim::SGDOptions(0.1));
  hvd::LearningRateWarmup warmup(sgd, hvd::LearningRateWarmupOptions(4).size(3));
  EXPECT_EQ(warmup.base_lrs(), (std::vector<double>{0.1, 0.5}));
  std::vector<double> first, second;
  for (int step = 1; step <= 6; ++step) {
    warmup.step();
    first.push_back(sgd.param_groups()[0].options().get_lr());
    second.push_back(sgd.param_groups()[1].options().get_lr());
  }
  for (int step = 1; step <= 6; ++step) {
    const double progress = std::min(step, 4) / 4.0;
    EXPECT_DOUBLE_EQ(first[step - 1], 0.1 * (1 + 2 * progress)) << "step " << step;
    EXPECT_DOUBLE_EQ(second[step - 1], 0.5 * (1 + 2 * progress)) << "step " << step;
  }
}

class HvdLocal : public ::testing::Test {
 protected:
  void TearDown() override { hvd::shutdown(); }
};

TEST_F(HvdLocal, NeedsInitOrAGroup) {
  EXPECT_FALSE(hvd::is_initialized());
  torch::nn::Linear model(2, 2);
  try {
    hvd::DistributedOptimizer optimizer(torch::optim::SGD(model->parameters(), 0.1));
    FAIL() << "constructed without a group";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("hvd::DistributedOptimizer needs a process group"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(
      hvd::LearningRateWarmup(*std::make_shared<torch::optim::SGD>(model->parameters(), 0.1), 5),
      ConfigError);
  EXPECT_THROW(hvd::init(std::shared_ptr<ProcessGroup>()), ConfigError);
}

TEST_F(HvdLocal, InvalidOptionsAreConfigErrors) {
  hvd::init(InitOptions().backend("gloo").rank(0).world_size(1));
  torch::nn::Linear model(2, 2);
  auto make = [&](hvd::DistributedOptimizerOptions options) {
    hvd::DistributedOptimizer optimizer(torch::optim::SGD(model->parameters(), 0.1), options);
  };
  EXPECT_THROW(make(hvd::DistributedOptimizerOptions().op(ReduceOp::kMax)), ConfigError);
  EXPECT_THROW(make(hvd::DistributedOptimizerOptions().fusion_threshold_bytes(-1)), ConfigError);
  EXPECT_THROW(make(hvd::DistributedOptimizerOptions().backward_passes_per_step(0)), ConfigError);
  EXPECT_THROW(hvd::DistributedOptimizer{std::shared_ptr<torch::optim::Optimizer>()}, ConfigError);
}

TEST_F(HvdLocal, TooManyBackwardPassesBeforeStepAreAnError) {
  hvd::init(InitOptions().backend("gloo").rank(0).world_size(1));
  torch::nn::Linear model(3, 1);
  hvd::DistributedOptimizer optimizer(
      torch::optim::SGD(model->parameters(), 0.1),
      hvd::DistributedOptimizerOptions().backward_passes_per_step(2));
  auto backward = [&] { model->forward(torch::ones({2, 3})).sum().backward(); };
  backward();
  backward();
  try {
    backward();
    FAIL() << "a third backward pass before step() was accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("was computed more than backward_passes_per_step = 2 "
                                         "time(s) before step()"),
              std::string::npos)
        << e.what();
  }
}

TEST_F(HvdLocal, OneRankTrainsLikeThePlainOptimizerAndSynchronizeThenStepReducesOnce) {
  hvd::init(InitOptions().backend("gloo").rank(0).world_size(1));
  torch::manual_seed(3);
  torch::nn::Linear model(4, 2);
  torch::manual_seed(3);
  torch::nn::Linear reference(4, 2);
  hvd::DistributedOptimizer optimizer(torch::optim::Adam(model->parameters(), 0.01));
  torch::optim::Adam plain(reference->parameters(), 0.01);
  for (int step = 0; step < 3; ++step) {
    torch::Tensor x = torch::randn({8, 4});
    optimizer.zero_grad();
    model->forward(x).pow(2).mean().backward();
    optimizer.synchronize();  // e.g. to clip gradients here
    optimizer.step();
    plain.zero_grad();
    reference->forward(x).pow(2).mean().backward();
    plain.step();
  }
  EXPECT_TRUE(torch::allclose(model->weight, reference->weight, 1e-6, 1e-7));
  EXPECT_EQ(optimizer.stats().synchronizations, 3);
  EXPECT_EQ(optimizer.stats().buffer_bytes, (std::vector<int64_t>{(8 + 2) * 4}));
}

}  // namespace
}  // namespace ddp::testing

// ddp::optim::SGD's state is torch::optim::SGD's: saved by either
// optimizer (torch::save, or a ddp snapshot), it loads into the other, and
// training then continues bit-identically on both; ZeroRedundancyOptimizer
// wraps it as it wraps LibTorch's SGD. One process (a group of one).

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <memory>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "common/temporary_directory.hpp"
#include "ddp/comm/environment.hpp"
#include "ddp/comm/init.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/optim/sgd.hpp"
#include "ddp/parallel/zero_redundancy_optimizer.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"
#include "sgd_checks.hpp"
#include "state_transfers.hpp"

namespace {

using ddp::testing::expect_same_parameters_and_buffers;
using ddp::testing::StateTransfer;
using ddp::testing::through_snapshot;
using ddp::testing::through_torch_save;
using torch::optim::SGDOptions;

constexpr int kStepsBeforeSave = 3;
constexpr int kStepsAfterLoad = 3;
const SGDOptions kSavedOptions = SGDOptions(0.05).momentum(0.9).weight_decay(1e-2);
// A snapshot restores the param groups' options too, so its loader starts
// with others.
const SGDOptions kOtherOptions = SGDOptions(1.0);

// Trains a model with a Saver, moves its state into a Loader (built with
// `loader_options`) over another model, and expects both to continue
// bit-identically, with the saved options.
template <typename Saver, typename Loader>
void expect_continuation_after(const StateTransfer& transfer, const SGDOptions& loader_options) {
  const auto batches = ddp::testing::small_batches(kStepsBeforeSave + kStepsAfterLoad, 11);
  torch::manual_seed(10);
  auto model = ddp::testing::small_model();
  Saver saver(model->parameters(), kSavedOptions);
  for (int step = 0; step < kStepsBeforeSave; ++step) {
    ddp::testing::train_step(model, saver, batches[step], /*closure=*/false);
  }
  torch::manual_seed(12);  // other initial values, which the transfer replaces
  auto resumed = ddp::testing::small_model();
  Loader loader(resumed->parameters(), loader_options);
  transfer(model, saver, resumed, loader);
  expect_same_parameters_and_buffers(loader, saver, "after loading");
  const auto& loaded = static_cast<const SGDOptions&>(loader.param_groups()[0].options());
  EXPECT_TRUE(loaded == kSavedOptions);
  for (int step = kStepsBeforeSave; step < kStepsBeforeSave + kStepsAfterLoad; ++step) {
    ddp::testing::train_step(model, saver, batches[step], false);
    ddp::testing::train_step(resumed, loader, batches[step], false);
    expect_same_parameters_and_buffers(loader, saver, "after step " + std::to_string(step));
  }
}

TEST(OptimSgdState, TorchSaveOfEitherOptimizerLoadsIntoTheOther) {
  {
    SCOPED_TRACE("saved by ddp::optim::SGD, loaded by torch::optim::SGD");
    expect_continuation_after<ddp::optim::SGD, torch::optim::SGD>(through_torch_save,
                                                                  kSavedOptions);
  }
  {
    SCOPED_TRACE("saved by torch::optim::SGD, loaded by ddp::optim::SGD");
    expect_continuation_after<torch::optim::SGD, ddp::optim::SGD>(through_torch_save,
                                                                  kSavedOptions);
  }
}

TEST(OptimSgdState, SnapshotOfEitherOptimizerResumesIntoTheOther) {
  {
    SCOPED_TRACE("saved by ddp::optim::SGD, resumed by torch::optim::SGD");
    expect_continuation_after<ddp::optim::SGD, torch::optim::SGD>(through_snapshot, kOtherOptions);
  }
  {
    SCOPED_TRACE("saved by torch::optim::SGD, resumed by ddp::optim::SGD");
    expect_continuation_after<torch::optim::SGD, ddp::optim::SGD>(through_snapshot, kOtherOptions);
  }
}

TEST(OptimSgdState, ZeroRedundancyOptimizerWrapsItAsLibTorchsSgd) {
  auto group = ddp::init(ddp::InitOptions(), ddp::EnvironmentMap{});
  const auto batches = ddp::testing::small_batches(5, 13);
  torch::manual_seed(14);
  auto model = ddp::testing::small_model();
  torch::manual_seed(14);
  auto reference = ddp::testing::small_model();
  ddp::ZeroRedundancyOptimizer sharded(model->parameters(),
                                       ddp::zero_optimizer<ddp::optim::SGD>(kSavedOptions), group);
  ddp::ZeroRedundancyOptimizer reference_sharded(
      reference->parameters(), ddp::zero_optimizer<torch::optim::SGD>(kSavedOptions), group);
  ASSERT_NE(dynamic_cast<ddp::optim::SGD*>(&sharded.local_optimizer()), nullptr);
  for (const auto& batch : batches) {
    for (auto* side : {&model, &reference}) {
      auto& zero = side == &model ? sharded : reference_sharded;
      zero.zero_grad();
      torch::mse_loss((*side)->forward(batch.first), batch.second).backward();
      zero.step();
    }
  }
  for (size_t i = 0; i < model->parameters().size(); ++i) {
    EXPECT_TRUE(ddp::testing::bit_identical(model->parameters()[i], reference->parameters()[i]))
        << "parameter " << i;
  }
  expect_same_parameters_and_buffers(sharded.local_optimizer(), reference_sharded.local_optimizer(),
                                     "after 5 steps");
  EXPECT_EQ(sharded.state_bytes(), reference_sharded.state_bytes());
  EXPECT_GT(sharded.state_bytes(), 0);  // the momentum buffers, counted as SGD's
}

}  // namespace

// ddp::optim::AdamW's state is torch::optim::AdamW's: saved by either
// optimizer (torch::save, or a ddp snapshot), it loads into the other, and
// training continues bit-identically on both; ZeroRedundancyOptimizer wraps
// it as it wraps LibTorch's, and steps as a plain AdamW over the whole
// model. One process (a group of one).

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <string>

#include "adam_checks.hpp"
#include "ddp/comm/init.hpp"
#include "ddp/optim/adamw.hpp"
#include "ddp/parallel/zero_redundancy_optimizer.hpp"
#include "state_transfers.hpp"

namespace {

using ddp::testing::expect_same_adam;
using ddp::testing::StateTransfer;
using torch::optim::AdamWOptions;
using torch::optim::AdamWParamState;

constexpr int kAdamStepsBeforeSave = 3;
constexpr int kAdamStepsAfterLoad = 3;
const AdamWOptions kSavedAdamWOptions = AdamWOptions(1e-2).weight_decay(0.05).amsgrad(true);

// Trains with a Saver, moves the state into a Loader over another model,
// and expects both to continue bit-identically.
template <typename Saver, typename Loader>
void expect_adam_continuation_after(const StateTransfer& transfer) {
  const auto batches = ddp::testing::small_batches(kAdamStepsBeforeSave + kAdamStepsAfterLoad, 21);
  torch::manual_seed(20);
  auto model = ddp::testing::small_model();
  Saver saver(model->parameters(), kSavedAdamWOptions);
  for (int step = 0; step < kAdamStepsBeforeSave; ++step)
    ddp::testing::train_step(model, saver, batches[step], /*closure=*/false);
  torch::manual_seed(22);  // other initial values, which the transfer replaces
  auto resumed = ddp::testing::small_model();
  Loader loader(resumed->parameters(), kSavedAdamWOptions);
  transfer(model, saver, resumed, loader);
  expect_same_adam<AdamWParamState>(loader, saver, "after loading");
  for (int step = kAdamStepsBeforeSave; step < kAdamStepsBeforeSave + kAdamStepsAfterLoad; ++step) {
    ddp::testing::train_step(model, saver, batches[step], false);
    ddp::testing::train_step(resumed, loader, batches[step], false);
    expect_same_adam<AdamWParamState>(loader, saver, "after step " + std::to_string(step));
  }
}

TEST(OptimAdamState, TorchSaveOrASnapshotOfEitherOptimizerLoadsIntoTheOther) {
  for (const bool snapshot : {false, true}) {
    const StateTransfer transfer =
        snapshot ? ddp::testing::through_snapshot : ddp::testing::through_torch_save;
    SCOPED_TRACE(snapshot ? "through a snapshot" : "through torch::save");
    {
      SCOPED_TRACE("saved by ddp::optim::AdamW, loaded by torch::optim::AdamW");
      expect_adam_continuation_after<ddp::optim::AdamW, torch::optim::AdamW>(transfer);
    }
    {
      SCOPED_TRACE("saved by torch::optim::AdamW, loaded by ddp::optim::AdamW");
      expect_adam_continuation_after<torch::optim::AdamW, ddp::optim::AdamW>(transfer);
    }
  }
}

TEST(OptimAdamState, ZeroRedundancyOptimizerWrapsItAsLibTorchsAdamW) {
  auto group = ddp::init(ddp::InitOptions(), ddp::EnvironmentMap{});
  const auto batches = ddp::testing::small_batches(5, 23);
  torch::manual_seed(24);
  auto model = ddp::testing::small_model();
  torch::manual_seed(24);
  auto reference = ddp::testing::small_model();
  ddp::ZeroRedundancyOptimizer sharded(
      model->parameters(), ddp::zero_optimizer<ddp::optim::AdamW>(kSavedAdamWOptions), group);
  torch::optim::AdamW reference_optimizer(reference->parameters(), kSavedAdamWOptions);
  ASSERT_NE(dynamic_cast<ddp::optim::AdamW*>(&sharded.local_optimizer()), nullptr);
  for (const auto& batch : batches) {
    sharded.zero_grad();
    torch::mse_loss(model->forward(batch.first), batch.second).backward();
    sharded.step();
    ddp::testing::train_step(reference, reference_optimizer, batch, false);
  }
  // One rank owns every piece, so the model's parameters are the ones a
  // plain LibTorch AdamW over the whole model makes.
  for (size_t i = 0; i < model->parameters().size(); ++i)
    EXPECT_TRUE(ddp::testing::bit_identical(model->parameters()[i], reference->parameters()[i]))
        << "parameter " << i;
  EXPECT_GT(sharded.state_bytes(), 0);
}

}  // namespace

// ddp::amp::GradScaler in one process: PyTorch's semantics for scaling,
// unscaling, skipping, backoff and growth; misuse; state save and load,
// through an archive and through a ddp snapshot.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <limits>
#include <sstream>
#include <string>

#include "common/error_capture.hpp"
#include "common/temporary_directory.hpp"
#include "ddp/amp/grad_scaler.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/init.hpp"
#include "ddp/snapshot/errors.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"

namespace {

using ddp::amp::GradScaler;
using ddp::amp::GradScalerOptions;
using ddp::amp::GradScalerState;
using ddp::testing::error_of;
namespace nn = torch::nn;

// A linear layer whose gradients are `value` (times the scale), optionally
// with `bad` in the weight's first element.
struct LinearWithGradients {
  nn::Linear model{nn::Linear(3, 2)};
  torch::optim::SGD optimizer{model->parameters(), 0.5};
  void gradients(double value, float bad = 0, bool inject = false) {
    for (auto& p : model->parameters()) p.mutable_grad() = torch::full_like(p, value);
    if (inject) model->weight.mutable_grad()[0][0] = bad;
  }
  std::vector<torch::Tensor> parameters() {
    std::vector<torch::Tensor> copies;
    for (auto& p : model->parameters()) copies.push_back(p.detach().clone());
    return copies;
  }
};

bool equal(const std::vector<torch::Tensor>& a, const std::vector<torch::Tensor>& b) {
  for (size_t i = 0; i < a.size(); ++i) {
    if (!torch::equal(a[i], b[i])) return false;
  }
  return a.size() == b.size();
}

TEST(AmpGradScaler, DefaultsArePyTorchs) {
  GradScaler scaler;
  EXPECT_EQ(scaler.get_scale(), 65536.0);
  EXPECT_EQ(scaler.get_growth_tracker(), 0);
  GradScalerState state = scaler.state();
  EXPECT_EQ(state.growth_factor, 2.0);
  EXPECT_EQ(state.backoff_factor, 0.5);
  EXPECT_EQ(state.growth_interval, 2000);
  EXPECT_TRUE(scaler.is_enabled());
}

TEST(AmpGradScaler, InvalidOptionsAreNamed) {
  auto make = [](GradScalerOptions options) { return [=] { GradScaler scaler(options); }; };
  EXPECT_NE(error_of<ddp::ConfigError>(make(GradScalerOptions().init_scale(0)))
                .find("the scale is 0; it must be positive and finite"),
            std::string::npos);
  EXPECT_NE(error_of<ddp::ConfigError>(make(GradScalerOptions().growth_factor(1)))
                .find("growth_factor is 1; it must be a finite number above 1"),
            std::string::npos);
  EXPECT_NE(error_of<ddp::ConfigError>(make(GradScalerOptions().backoff_factor(1.5)))
                .find("backoff_factor is 1.5; it must lie strictly between 0 and 1"),
            std::string::npos);
  EXPECT_NE(error_of<ddp::ConfigError>(make(GradScalerOptions().growth_interval(0)))
                .find("growth_interval is 0; it must be at least 1 step"),
            std::string::npos);
}

TEST(AmpGradScaler, ScaleMultipliesTheLossAndWidensA16BitLoss) {
  GradScaler scaler(GradScalerOptions().init_scale(8));
  auto loss = torch::tensor(1.5f);
  EXPECT_EQ(scaler.scale(loss).item<float>(), 12.f);
  auto half_loss = torch::tensor(3.0f).to(torch::kBFloat16);
  auto scaled = scaler.scale(half_loss);
  EXPECT_EQ(scaled.scalar_type(), torch::kFloat);
  EXPECT_EQ(scaled.item<float>(), 24.f);
}

TEST(AmpGradScaler, UnscaleDividesOnceAndIsIdempotentUntilUpdate) {
  LinearWithGradients s;
  GradScaler scaler(GradScalerOptions().init_scale(4));
  s.gradients(8);
  scaler.unscale_(s.optimizer);
  scaler.unscale_(s.optimizer);  // no second division
  EXPECT_TRUE(torch::equal(s.model->weight.grad(), torch::full({2, 3}, 2.f)));
  auto before = s.parameters();
  EXPECT_TRUE(scaler.step(s.optimizer));  // does not unscale again either
  EXPECT_TRUE(torch::equal(s.model->weight, before[0] - 0.5 * 2));
  scaler.update();
  EXPECT_FALSE(scaler.found_inf());
}

TEST(AmpGradScaler, InfOrNaNSkipsTheStepKeepsTheParametersAndHalvesTheScale) {
  for (float bad : {std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                    std::numeric_limits<float>::quiet_NaN()}) {
    LinearWithGradients s;
    GradScaler scaler(GradScalerOptions().init_scale(1024).growth_interval(5));
    s.gradients(1024);  // one clean step first: the tracker moves to 1
    ASSERT_TRUE(scaler.step(s.optimizer));
    scaler.update();
    ASSERT_EQ(scaler.get_growth_tracker(), 1);
    auto before = s.parameters();
    s.gradients(1024, bad, /*inject=*/true);
    EXPECT_FALSE(scaler.step(s.optimizer)) << bad;
    EXPECT_TRUE(scaler.found_inf());
    EXPECT_TRUE(equal(s.parameters(), before)) << bad;
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), 512.0);
    EXPECT_EQ(scaler.get_growth_tracker(), 0);
  }
}

// Gradients of several dtypes in one optimizer are unscaled group by group
// (one fused kernel per device and dtype where LibTorch has one); an inf in
// any group skips the step.
TEST(AmpGradScaler, GradientsOfEveryDtypeAreUnscaledAndChecked) {
  for (const auto bad_dtype : {torch::kFloat, torch::kBFloat16, torch::kDouble}) {
    std::vector<torch::Tensor> params = {torch::ones({2, 3}, torch::kFloat).requires_grad_(),
                                         torch::ones({4}, torch::kBFloat16).requires_grad_(),
                                         torch::ones({5}, torch::kDouble).requires_grad_(),
                                         torch::ones({3}, torch::kFloat).requires_grad_()};
    torch::optim::SGD optimizer(params, 0.25);
    GradScaler scaler(GradScalerOptions().init_scale(8));
    for (auto& p : params) p.mutable_grad() = torch::full_like(p, 24);
    scaler.unscale_(optimizer);
    for (auto& p : params) {
      EXPECT_TRUE(torch::equal(p.grad(), torch::full_like(p, 3))) << p.scalar_type();
    }
    ASSERT_TRUE(scaler.step(optimizer));
    scaler.update();
    for (auto& p : params) {
      EXPECT_TRUE(torch::equal(p.detach(), torch::full_like(p, 1 - 0.25 * 3))) << p.scalar_type();
    }
    // The next step has an inf in one group only.
    for (auto& p : params) {
      p.mutable_grad() = torch::full_like(p, 24);
      if (p.scalar_type() == bad_dtype)
        p.mutable_grad()[0] = std::numeric_limits<float>::infinity();
    }
    EXPECT_FALSE(scaler.step(optimizer)) << bad_dtype;
    scaler.update();
    EXPECT_EQ(scaler.get_scale(), 4.0) << bad_dtype;
    for (auto& p : params) {
      EXPECT_TRUE(torch::equal(p.detach(), torch::full_like(p, 0.25))) << p.scalar_type();
    }
  }
}

TEST(AmpGradScaler, GrowsAfterExactlyGrowthIntervalCleanSteps) {
  LinearWithGradients s;
  GradScaler scaler(GradScalerOptions().init_scale(16).growth_interval(4).growth_factor(3));
  for (int step = 1; step <= 9; ++step) {
    s.gradients(scaler.get_scale());
    ASSERT_TRUE(scaler.step(s.optimizer));
    scaler.update();
    const double expected = step < 4 ? 16 : step < 8 ? 48 : 144;
    EXPECT_EQ(scaler.get_scale(), expected) << "after step " << step;
    EXPECT_EQ(scaler.get_growth_tracker(), step % 4) << "after step " << step;
  }
}

TEST(AmpGradScaler, GrowthThatWouldOverflowFloat32KeepsTheScale) {
  LinearWithGradients s;
  GradScaler scaler(GradScalerOptions().init_scale(std::ldexp(1.0, 127)).growth_interval(1));
  s.gradients(1);
  scaler.step(s.optimizer);
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), std::ldexp(1.0, 127));
  EXPECT_EQ(scaler.get_growth_tracker(), 0);
}

TEST(AmpGradScaler, MisuseIsAnErrorThatSaysWhatToDo) {
  LinearWithGradients s;
  GradScaler scaler;
  EXPECT_NE(error_of<ddp::InvalidArgumentError>([&] {
              scaler.update();
            }).find("no optimizer was unscaled or stepped since the last update()"),
            std::string::npos);
  s.gradients(1);
  scaler.step(s.optimizer);
  EXPECT_NE(error_of<ddp::InvalidArgumentError>([&] { scaler.step(s.optimizer); })
                .find("step() already ran for this optimizer since the last update(); call "
                      "update() once per iteration"),
            std::string::npos);
  EXPECT_NE(error_of<ddp::InvalidArgumentError>([&] {
              scaler.unscale_(s.optimizer);
            }).find("unscale_() belongs between backward() and step()"),
            std::string::npos);
  scaler.update();
  s.gradients(1);
  EXPECT_TRUE(scaler.step(s.optimizer));  // a fresh iteration works again
}

TEST(AmpGradScaler, DisabledPassesEverythingThrough) {
  LinearWithGradients s;
  GradScaler scaler(GradScalerOptions().enabled(false));
  auto loss = torch::tensor(2.f);
  EXPECT_TRUE(scaler.scale(loss).is_same(loss));
  EXPECT_EQ(scaler.get_scale(), 1.0);
  auto before = s.parameters();
  s.gradients(1, std::numeric_limits<float>::infinity(), true);
  EXPECT_TRUE(scaler.step(s.optimizer));  // no checks at all
  scaler.update();
  EXPECT_FALSE(equal(s.parameters(), before));
}

TEST(AmpGradScaler, UpdateWithANewScaleSetsIt) {
  LinearWithGradients s;
  GradScaler scaler;
  scaler.update(128.0);
  EXPECT_EQ(scaler.get_scale(), 128.0);
  EXPECT_NE(error_of<ddp::ConfigError>([&] { scaler.update(-1.0); }).find("the scale is -1"),
            std::string::npos);
}

GradScaler scaler_after_some_steps() {
  LinearWithGradients s;
  GradScaler scaler(GradScalerOptions().init_scale(300).growth_interval(7).backoff_factor(0.25));
  s.gradients(1, std::numeric_limits<float>::infinity(), true);
  scaler.step(s.optimizer);
  scaler.update();  // 75
  for (int i = 0; i < 3; ++i) {
    s.gradients(1);
    scaler.step(s.optimizer);
    scaler.update();
  }
  return scaler;
}

void expect_same_state(const GradScalerState& a, const GradScalerState& b) {
  EXPECT_EQ(a.scale, b.scale);
  EXPECT_EQ(a.growth_tracker, b.growth_tracker);
  EXPECT_EQ(a.growth_factor, b.growth_factor);
  EXPECT_EQ(a.backoff_factor, b.backoff_factor);
  EXPECT_EQ(a.growth_interval, b.growth_interval);
}

TEST(AmpGradScaler, StateRoundTripsThroughLoadStateAndAnArchive) {
  GradScaler trained = scaler_after_some_steps();
  ASSERT_EQ(trained.get_scale(), 75.0);
  ASSERT_EQ(trained.get_growth_tracker(), 3);
  GradScaler restored;
  restored.load_state(trained.state());
  expect_same_state(restored.state(), trained.state());

  torch::serialize::OutputArchive out;
  trained.save(out);
  std::stringstream bytes;
  out.save_to(bytes);
  torch::serialize::InputArchive in;
  in.load_from(bytes);
  GradScaler loaded;
  loaded.load(in);
  expect_same_state(loaded.state(), trained.state());

  GradScalerState invalid = trained.state();
  invalid.growth_tracker = 7;
  EXPECT_NE(error_of<ddp::ConfigError>([&] {
              loaded.load_state(invalid);
            }).find("growth_tracker is 7; it must lie in [0, 7)"),
            std::string::npos);
  torch::serialize::InputArchive empty;
  EXPECT_NE(error_of<ddp::ConfigError>([&] {
              loaded.load(empty);
            }).find("the archive has no scalar 'scale'"),
            std::string::npos);
}

TEST(AmpGradScaler, StateIsPartOfASnapshot) {
  const ddp::testing::TemporaryDirectory dir("ddp-amp-snapshot-");
  auto group = ddp::init(ddp::InitOptions().backend("gloo").rank(0).world_size(1));
  ddp::snapshot::SnapshotManager snapshots(ddp::snapshot::SnapshotOptions(dir.string()), group);
  GradScaler trained = scaler_after_some_steps();
  ddp::snapshot::TrainingState saved;
  saved.grad_scaler = &trained;
  snapshots.save(saved);

  GradScaler fresh;
  ddp::snapshot::TrainingState resumed;
  resumed.grad_scaler = &fresh;
  ASSERT_TRUE(snapshots.resume(resumed));
  expect_same_state(fresh.state(), trained.state());

  ddp::snapshot::SnapshotManager other(
      ddp::snapshot::SnapshotOptions(dir.string()).prefix("noscaler"), group);
  other.save(ddp::snapshot::TrainingState());
  std::string message = error_of<ddp::SnapshotError>([&] { other.resume(resumed); });
  EXPECT_NE(message.find("the snapshot holds no gradient scaler state"), std::string::npos)
      << message;
}

}  // namespace

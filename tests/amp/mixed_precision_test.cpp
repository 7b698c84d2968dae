// Opt levels O0-O3 in one process: what each casts, the master weights of
// O2, the autocast guard, errors, and training the tutorial ConvNet to a
// float32 loss with bfloat16; float16 on CUDA where there is a GPU.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <cmath>
#include <limits>
#include <string>

#include "base/compat/torch_compat.hpp"
#include "common/error_capture.hpp"
#include "common/models.hpp"
#include "common/temporary_directory.hpp"
#include "ddp/amp/mixed_precision.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/init.hpp"
#include "ddp/nn/sync_batch_norm.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"

namespace {

using ddp::amp::AmpOptions;
using ddp::amp::AutocastGuard;
using ddp::amp::GradScaler;
using ddp::amp::GradScalerOptions;
using ddp::amp::MixedPrecision;
using ddp::amp::OptLevel;
using ddp::examples::ConvNet;
using ddp::testing::error_of;
namespace nn = torch::nn;

TEST(AmpOptLevel, ParsesApexSpellingsAndNamesABadOne) {
  EXPECT_EQ(ddp::amp::parse_opt_level("O0"), OptLevel::kO0);
  EXPECT_EQ(ddp::amp::parse_opt_level("O1"), OptLevel::kO1);
  EXPECT_EQ(ddp::amp::parse_opt_level("O2"), OptLevel::kO2);
  EXPECT_EQ(ddp::amp::parse_opt_level("O3"), OptLevel::kO3);
  EXPECT_STREQ(ddp::amp::to_string(OptLevel::kO2), "O2");
  for (const char* bad : {"O4", "o1", "01", ""}) {
    EXPECT_NE(error_of<ddp::ConfigError>([&] {
                ddp::amp::parse_opt_level(bad);
              }).find(std::string("unknown mixed-precision opt level '") + bad + "'"),
              std::string::npos);
  }
}

TEST(AmpAutocast, GuardRunsConvolutionsInBFloat16AndNestsAndRestores) {
  nn::Conv2d conv(nn::Conv2dOptions(1, 2, 3));
  auto x = torch::randn({1, 1, 5, 5});
  EXPECT_FALSE(ddp::compat::autocast_enabled(c10::kCPU));
  {
    AutocastGuard outer(c10::kCPU, torch::kBFloat16);
    EXPECT_TRUE(outer.active());
    EXPECT_EQ(conv->forward(x).scalar_type(), torch::kBFloat16);
    auto loss = torch::cross_entropy_loss(conv->forward(x).flatten(1), torch::tensor({3}));
    EXPECT_EQ(loss.scalar_type(), torch::kFloat);  // a float32 op on bfloat16 input
    {
      AutocastGuard inner(c10::kCPU, torch::kBFloat16);
      AutocastGuard off(c10::kCPU, torch::kBFloat16, /*enabled=*/false);
      EXPECT_FALSE(off.active());
    }
    EXPECT_TRUE(ddp::compat::autocast_enabled(c10::kCPU));
    EXPECT_EQ(conv->forward(x).scalar_type(), torch::kBFloat16);
  }
  EXPECT_FALSE(ddp::compat::autocast_enabled(c10::kCPU));
  EXPECT_EQ(conv->forward(x).scalar_type(), torch::kFloat);
}

TEST(AmpAutocast, Float16OnCpuAndOtherDtypesAreClearErrors) {
  auto message = error_of<ddp::ConfigError>([] { AutocastGuard g(c10::kCPU, torch::kHalf); });
  EXPECT_NE(message.find("float16 needs a CUDA model: LibTorch has no float16 convolution and "
                         "no float16 autocast on CPU; use bfloat16 on CPU (the default)"),
            std::string::npos)
      << message;
  EXPECT_NE(error_of<ddp::ConfigError>([] {
              AutocastGuard g(c10::kCPU, torch::kDouble);
            }).find("the 16-bit type is float64; use bfloat16 or (on CUDA) float16"),
            std::string::npos);
  nn::Linear model(2, 2);
  torch::optim::SGD optimizer(model->parameters(), 0.1);
  EXPECT_NE(error_of<ddp::ConfigError>([&] {
              MixedPrecision mp(*model, optimizer, AmpOptions(OptLevel::kO2).dtype(torch::kHalf));
            }).find("MixedPrecision: float16 needs a CUDA model"),
            std::string::npos);
}

TEST(AmpMixedPrecision, O0AndO1LeaveTheModelInFloat32) {
  for (OptLevel level : {OptLevel::kO0, OptLevel::kO1}) {
    ConvNet net;
    torch::optim::SGD optimizer(net->parameters(), 0.1);
    MixedPrecision mp(*net, optimizer, AmpOptions(level));
    for (auto& p : net->parameters()) EXPECT_EQ(p.scalar_type(), torch::kFloat);
    auto x = torch::randn({2, 1, 28, 28});
    EXPECT_TRUE(mp.cast_input(x).is_same(x));
    EXPECT_EQ(mp.autocast().active(), level == OptLevel::kO1);
    EXPECT_EQ(mp.forward(net, x).scalar_type(), torch::kFloat);
    EXPECT_TRUE(mp.master_weights().empty());
  }
}

TEST(AmpMixedPrecision, O2CastsAllButBatchNormAndStepsFloat32Masters) {
  ConvNet net;
  auto fc_weight_before = net->fc->weight.detach().clone();
  torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  MixedPrecision mp(*net, optimizer, AmpOptions(OptLevel::kO2));
  for (const auto& item : net->named_parameters()) {
    const bool batch_norm = item.key().find(".1.") != std::string::npos;  // layerN.1 = BatchNorm2d
    EXPECT_EQ(item.value().scalar_type(), batch_norm ? torch::kFloat : torch::kBFloat16)
        << item.key();
  }
  for (const auto& item : net->named_buffers()) {
    if (item.value().is_floating_point()) EXPECT_EQ(item.value().scalar_type(), torch::kFloat);
  }
  // The optimizer steps float32 tensors only: masters, and BatchNorm's own.
  size_t optimizer_parameters = 0;
  for (const auto& group : optimizer.param_groups()) {
    for (const auto& p : group.params()) {
      EXPECT_EQ(p.scalar_type(), torch::kFloat);
      ++optimizer_parameters;
    }
  }
  EXPECT_EQ(optimizer_parameters, net->parameters().size());
  auto masters = mp.master_weights();
  EXPECT_EQ(masters.size(), 6u);  // 2 convolutions, the linear layer: weight and bias each
  ASSERT_EQ(masters.count("amp.master/fc.weight"), 1u);
  EXPECT_TRUE(torch::equal(masters["amp.master/fc.weight"], fc_weight_before));  // not rounded
  EXPECT_FALSE(masters["amp.master/fc.weight"].is_same(net->fc->weight));

  auto x = torch::randn({4, 1, 28, 28});
  auto y = torch::randint(0, 10, {4});
  GradScaler scaler(GradScalerOptions().init_scale(256));
  mp.zero_grad();
  scaler.scale(torch::cross_entropy_loss(mp.forward(net, x), y)).backward();
  EXPECT_EQ(net->fc->weight.grad().scalar_type(), torch::kBFloat16);
  mp.unscale_(scaler);  // widened into the masters, unscaled in float32
  auto master_grad = masters["amp.master/fc.weight"].grad();
  ASSERT_TRUE(master_grad.defined());
  EXPECT_EQ(master_grad.scalar_type(), torch::kFloat);
  EXPECT_TRUE(torch::equal(master_grad, net->fc->weight.grad().to(torch::kFloat) / 256));
  EXPECT_TRUE(mp.step(scaler));
  scaler.update();
  EXPECT_FALSE(torch::equal(masters["amp.master/fc.weight"], fc_weight_before));
  EXPECT_TRUE(torch::equal(net->fc->weight, masters["amp.master/fc.weight"].to(torch::kBFloat16)));
}

TEST(AmpMixedPrecision, O2OverflowLeavesMastersAndModelUnchanged) {
  ConvNet net;
  torch::optim::SGD optimizer(net->parameters(), 0.1);
  MixedPrecision mp(*net, optimizer, AmpOptions(OptLevel::kO2));
  GradScaler scaler;
  mp.zero_grad();
  scaler
      .scale(torch::cross_entropy_loss(mp.forward(net, torch::randn({2, 1, 28, 28})),
                                       torch::tensor({1, 2})))
      .backward();
  net->layer1->ptr(0)->as<nn::Conv2dImpl>()->weight.mutable_grad().view(-1)[3] =
      std::numeric_limits<float>::quiet_NaN();
  auto model_before = net->parameters();
  for (auto& t : model_before) t = t.detach().clone();
  auto masters_before = mp.master_weights();
  for (auto& [name, t] : masters_before) t = t.detach().clone();
  EXPECT_FALSE(mp.step(scaler));
  scaler.update();
  EXPECT_EQ(scaler.get_scale(), 32768.0);
  auto model_after = net->parameters();
  for (size_t i = 0; i < model_after.size(); ++i)
    EXPECT_TRUE(torch::equal(model_after[i], model_before[i]));
  for (auto& [name, t] : mp.master_weights())
    EXPECT_TRUE(torch::equal(t, masters_before[name])) << name;
}

TEST(AmpMixedPrecision, O3CastsEverythingAndKeepsNoMasters) {
  ConvNet net;
  torch::optim::SGD optimizer(net->parameters(), 0.1);
  MixedPrecision mp(*net, optimizer, AmpOptions(OptLevel::kO3));
  for (auto& p : net->parameters()) EXPECT_EQ(p.scalar_type(), torch::kBFloat16);
  for (const auto& item : net->named_buffers()) {
    EXPECT_EQ(item.value().scalar_type(),
              item.key().find("num_batches_tracked") != std::string::npos ? torch::kLong
                                                                          : torch::kBFloat16);
  }
  EXPECT_TRUE(mp.master_weights().empty());
  EXPECT_TRUE(optimizer.param_groups()[0].params()[0].is_same(net->parameters()[0]));
  EXPECT_EQ(mp.cast_input(torch::randn({1})).scalar_type(), torch::kBFloat16);
  EXPECT_EQ(mp.cast_input(torch::tensor({3})).scalar_type(), torch::kLong);  // labels stay
}

TEST(AmpMixedPrecision, O2KeepsSyncBatchNormInFloat32) {
  auto group = ddp::init(ddp::InitOptions().backend("gloo").rank(0).world_size(1));
  nn::Sequential net(nn::Linear(4, 4), ddp::nn::SyncBatchNorm(nn::BatchNormOptions(4), group),
                     nn::Linear(4, 2));
  torch::optim::SGD optimizer(net->parameters(), 0.1);
  MixedPrecision mp(*net, optimizer, AmpOptions(OptLevel::kO2));
  EXPECT_EQ(net->ptr(0)->as<nn::LinearImpl>()->weight.scalar_type(), torch::kBFloat16);
  EXPECT_EQ(net->ptr(1)->as<ddp::nn::SyncBatchNormImpl>()->weight.scalar_type(), torch::kFloat);
  EXPECT_EQ(net->ptr(1)->as<ddp::nn::SyncBatchNormImpl>()->running_var.scalar_type(),
            torch::kFloat);
  EXPECT_EQ(mp.forward(net, torch::randn({3, 4})).scalar_type(), torch::kFloat);
}

TEST(AmpMixedPrecision, AnOptimizerWithStateIsRejectedAtO2AndO3) {
  nn::Linear model(2, 2);
  torch::optim::Adam optimizer(model->parameters());
  model->forward(torch::randn({1, 2})).sum().backward();
  optimizer.step();
  for (OptLevel level : {OptLevel::kO2, OptLevel::kO3}) {
    EXPECT_NE(error_of<ddp::ConfigError>([&] {
                MixedPrecision mp(*model, optimizer, AmpOptions(level));
              }).find("the optimizer already holds state"),
              std::string::npos);
  }
}

// O2 training state: the model (16-bit), the optimizer (stepping masters),
// the scaler, and the masters as extra tensors.
struct O2Trainer {
  ConvNet net;
  torch::optim::SGD optimizer{net->parameters(), torch::optim::SGDOptions(0.05).momentum(0.9)};
  MixedPrecision mp{*net, optimizer, AmpOptions(OptLevel::kO2)};
  GradScaler scaler{GradScalerOptions().init_scale(1024).growth_interval(2)};

  void train(int from, int to) {
    for (int step = from; step < to; ++step) {
      torch::manual_seed(900 + step);
      auto x = torch::randn({4, 1, 28, 28});
      auto y = torch::randint(0, 10, {4});
      mp.zero_grad();
      scaler.scale(torch::cross_entropy_loss(mp.forward(net, x), y)).backward();
      mp.step(scaler);
      scaler.update();
    }
  }
  ddp::snapshot::TrainingState state() {
    ddp::snapshot::TrainingState s;
    s.model = net.ptr().get();
    s.optimizer = &optimizer;
    s.grad_scaler = &scaler;
    auto masters = mp.master_weights();
    s.extra_tensors.insert(masters.begin(), masters.end());
    s.include_rng = false;
    return s;
  }
};

TEST(AmpMixedPrecision, O2ResumesBitExactlyFromASnapshotWithMastersAndScaler) {
  const ddp::testing::TemporaryDirectory dir("ddp-amp-o2-");
  ddp::snapshot::SnapshotManager snapshots(
      ddp::snapshot::SnapshotOptions(dir.string()),
      ddp::init(ddp::InitOptions().backend("gloo").rank(0).world_size(1)));
  torch::manual_seed(1);
  O2Trainer uninterrupted;
  uninterrupted.train(0, 3);
  snapshots.save(uninterrupted.state());
  const double saved_scale = uninterrupted.scaler.get_scale();
  ASSERT_EQ(saved_scale, 2048.0);  // grew after step 2 (interval 2); the tracker is at 1
  uninterrupted.train(3, 6);

  torch::manual_seed(77);  // other initial weights: everything must come from the snapshot
  O2Trainer resumed;
  auto state = resumed.state();
  ASSERT_TRUE(snapshots.resume(state));
  EXPECT_EQ(resumed.scaler.get_scale(), saved_scale);
  EXPECT_EQ(resumed.scaler.get_growth_tracker(), 1);
  resumed.train(3, 6);
  auto a = uninterrupted.net->parameters(), b = resumed.net->parameters();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_TRUE(torch::equal(a[i], b[i])) << i;
  auto ma = uninterrupted.mp.master_weights(), mb = resumed.mp.master_weights();
  for (auto& [name, t] : ma) EXPECT_TRUE(torch::equal(t, mb.at(name))) << name;
  EXPECT_EQ(resumed.scaler.get_scale(), uninterrupted.scaler.get_scale());
  EXPECT_EQ(resumed.scaler.get_growth_tracker(), uninterrupted.scaler.get_growth_tracker());
}

// Note [Convergence tolerance]
// The ConvNet memorizes a fixed teacher's labels of 16 images in 12
// full-batch SGD steps (lr 0.01), every level through the same loop with a
// GradScaler. Float32 must learn (its mean loss over the last 4 steps falls
// below a quarter of the first loss, 2.85 -> about 0.35), and each bfloat16
// level must end within 0.05 of that mean (measured: within 0.01).
struct TrainingRun {
  std::vector<float> losses;
  float tail() const {
    float sum = 0;
    for (size_t i = losses.size() - 4; i < losses.size(); ++i) sum += losses[i];
    return sum / 4;
  }
};

TrainingRun train_conv_net(OptLevel level) {
  torch::manual_seed(2024);
  auto images = torch::randn({16, 1, 28, 28});
  auto teacher = torch::randn({28 * 28, 10});
  auto labels = images.view({16, -1}).matmul(teacher).argmax(1);
  torch::manual_seed(1);
  ConvNet net;
  torch::optim::SGD optimizer(net->parameters(), 0.01);
  MixedPrecision mp(*net, optimizer, AmpOptions(level));
  GradScaler scaler;
  TrainingRun run;
  for (int step = 0; step < 12; ++step) {
    mp.zero_grad();
    auto loss = torch::cross_entropy_loss(mp.forward(net, images), labels);
    scaler.scale(loss).backward();
    mp.step(scaler);
    scaler.update();
    run.losses.push_back(loss.item<float>());
  }
  return run;
}

TEST(AmpConvergence, BFloat16LevelsReachTheFloat32LossOnTheConvNet) {
  const TrainingRun reference = train_conv_net(OptLevel::kO0);
  std::string losses = "O0:";
  for (float l : reference.losses) losses += " " + std::to_string(l);
  EXPECT_LT(reference.tail(), 0.25f * reference.losses.front()) << losses;
  for (OptLevel level : {OptLevel::kO1, OptLevel::kO2, OptLevel::kO3}) {
    const TrainingRun run = train_conv_net(level);
    std::string mine = ddp::amp::to_string(level) + std::string(":");
    for (float l : run.losses) mine += " " + std::to_string(l);
    EXPECT_NEAR(run.tail(), reference.tail(), 0.05f) << losses << "\n" << mine;
  }
}

// float16 exists for CUDA models only (Note [Autocast per device type]).
TEST(AmpFloat16, LevelsTrainOnCudaWithLossScaling) {
  if (!torch::cuda::is_available()) {
    GTEST_SKIP() << "float16 mixed precision needs a CUDA device and this machine has none "
                    "(LibTorch has no float16 convolution on CPU); the bfloat16 tests cover CPU";
  }
  for (OptLevel level : {OptLevel::kO1, OptLevel::kO2, OptLevel::kO3}) {
    torch::manual_seed(5);
    ConvNet net;
    net->to(torch::kCUDA);
    torch::optim::SGD optimizer(net->parameters(), torch::optim::SGDOptions(0.02).momentum(0.9));
    MixedPrecision mp(*net, optimizer, AmpOptions(level).dtype(torch::kHalf));
    if (level == OptLevel::kO2) {
      EXPECT_EQ(net->fc->weight.scalar_type(), torch::kHalf);
      EXPECT_EQ(mp.master_weights().at("amp.master/fc.weight").scalar_type(), torch::kFloat);
    }
    GradScaler scaler;
    auto x = torch::randn({16, 1, 28, 28}, torch::kCUDA);
    auto y = torch::randint(0, 10, {16}, torch::TensorOptions(torch::kCUDA).dtype(torch::kLong));
    float first = 0, last = 0;
    int stepped = 0;
    for (int step = 0; step < 20; ++step) {
      mp.zero_grad();
      auto loss = torch::cross_entropy_loss(mp.forward(net, x), y);
      scaler.scale(loss).backward();
      stepped += mp.step(scaler);
      scaler.update();
      if (step == 0) first = loss.item<float>();
      last = loss.item<float>();
    }
    EXPECT_TRUE(std::isfinite(last)) << ddp::amp::to_string(level);
    EXPECT_GT(stepped, 10) << ddp::amp::to_string(level);
    EXPECT_LT(last, first) << ddp::amp::to_string(level);
  }
}

}  // namespace

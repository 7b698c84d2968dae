// ddp::nn::SyncBatchNorm with N = 1, 2, 3 real processes against BatchNorm in
// one process on the concatenated batch (sync_batch_norm_checks.cpp), and
// convert_sync_batchnorm / the layer's own checks in a group of one.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <set>
#include <string>

#include "common/error_capture.hpp"
#include "common/expect_checks.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/init.hpp"
#include "ddp/nn/sync_batch_norm.hpp"
#include "multiprocess/harness.hpp"
#include "nn/sync_batch_norm_checks.hpp"

namespace ddp::testing {
namespace {

namespace nn = torch::nn;
using ddp::nn::convert_sync_batchnorm;
using ddp::nn::SyncBatchNorm;
using ddp::nn::SyncBatchNormImpl;

std::shared_ptr<ProcessGroup> group_of_one() {
  static auto group = init(InitOptions().backend("gloo").rank(0).world_size(1));
  return group;
}

class NnSyncBatchNormRanks : public ::testing::TestWithParam<int> {};

TEST_P(NnSyncBatchNormRanks, MatchesBatchNormOnTheWholeBatch) {
  const int world = GetParam();
  auto results = run_ranks(world, {"check"}, torchrun_environment, std::chrono::seconds(150));
  expect_checks(results, sync_batch_norm_check_names(world));
}

INSTANTIATE_TEST_SUITE_P(NnSyncBatchNorm, NnSyncBatchNormRanks, ::testing::Values(1, 2, 3),
                         [](const auto& info) { return "N" + std::to_string(info.param); });

// The same checks with the shared-memory backend underneath: SyncBatchNorm
// works unchanged on it.
TEST(NnSyncBatchNormOnShm, MatchesBatchNormOnTheWholeBatch) {
  const int world = 3;
  auto results =
      run_ranks(world, {"check", "shm"}, torchrun_environment, std::chrono::seconds(150));
  expect_checks(results, sync_batch_norm_check_names(world));
}

TEST(NnSyncBatchNormConvert, RootBatchNormBecomesASyncLayerSharingItsTensorsAndOptions) {
  nn::BatchNorm2d bn(nn::BatchNormOptions(3).eps(1e-3).momentum(0.2));
  bn->forward(torch::randn({4, 3, 2, 2}) * 3 + 1);  // running statistics move
  bn->eval();
  auto converted = convert_sync_batchnorm(bn.ptr(), group_of_one());
  auto* sync = converted->as<SyncBatchNormImpl>();
  ASSERT_NE(sync, nullptr);
  EXPECT_TRUE(sync->weight.is_same(bn->weight));
  EXPECT_TRUE(sync->bias.is_same(bn->bias));
  EXPECT_TRUE(sync->running_mean.is_same(bn->running_mean));
  EXPECT_TRUE(sync->running_var.is_same(bn->running_var));
  EXPECT_TRUE(sync->num_batches_tracked.is_same(bn->num_batches_tracked));
  EXPECT_EQ(sync->options.eps(), 1e-3);
  EXPECT_EQ(sync->options.momentum(), 0.2);
  EXPECT_FALSE(sync->is_training());
  auto x = torch::randn({2, 3, 2, 2});
  EXPECT_TRUE(torch::allclose(sync->forward(x), bn->forward(x), 1e-6, 1e-6));
}

TEST(NnSyncBatchNormConvert, ChildrenOfSequentialModuleListAndModuleDictAreReplacedInPlace) {
  nn::Sequential inner(nn::Linear(4, 4), nn::BatchNorm1d(4));
  nn::ModuleList list(inner, nn::BatchNorm1d(4));
  nn::ModuleDict dict(std::vector<std::pair<std::string, std::shared_ptr<nn::Module>>>{
      {"norm", std::make_shared<nn::BatchNorm2dImpl>(2)}, {"list", list.ptr()}});
  auto root = convert_sync_batchnorm(dict.ptr(), group_of_one());
  EXPECT_EQ(root.get(), dict.ptr().get());
  EXPECT_NE(dict["norm"]->as<SyncBatchNormImpl>(), nullptr);
  EXPECT_NE(list[1]->as<SyncBatchNormImpl>(), nullptr);
  EXPECT_NE(inner->ptr(1)->as<SyncBatchNormImpl>(), nullptr);  // what forward calls
  int sync_layers = 0;
  for (const auto& module : dict->modules()) {
    EXPECT_EQ(dynamic_cast<nn::BatchNorm1dImpl*>(module.get()), nullptr);
    sync_layers += module->as<SyncBatchNormImpl>() != nullptr;
  }
  EXPECT_EQ(sync_layers, 3);
  EXPECT_EQ(inner->named_children()["1"].get(), inner->ptr(1).get());
  auto y = inner->forward(torch::randn({5, 4}));  // runs the SyncBatchNorm
  EXPECT_EQ(y.sizes(), (std::vector<int64_t>{5, 4}));
  EXPECT_NEAR(y.mean(0).abs().max().item<float>(), 0.f, 1e-5);
}

struct HoldsAMemberImpl : nn::Module {
  nn::Sequential body{
      register_module("body", nn::Sequential(nn::Linear(3, 3), nn::BatchNorm1d(3)))};
  nn::BatchNorm1d norm{register_module("norm", nn::BatchNorm1d(3))};
  torch::Tensor forward(torch::Tensor x) { return norm(body->forward(x)); }
};
TORCH_MODULE(HoldsAMember);

TEST(NnSyncBatchNormConvert, BatchNormHeldAsAMemberIsAnErrorNamingItAndNothingChanges) {
  HoldsAMember model;
  auto message =
      error_of<InvalidArgumentError>([&] { convert_sync_batchnorm(model.ptr(), group_of_one()); });
  EXPECT_NE(message.find("the batch-norm layer 'norm' is a child of a"), std::string::npos)
      << message;
  EXPECT_NE(message.find("which is not a Sequential, ModuleList or ModuleDict"), std::string::npos);
  EXPECT_NE(message.find("Nothing was converted"), std::string::npos);
  EXPECT_NE(model->body->ptr(1)->as<nn::BatchNorm1dImpl>(), nullptr);
}

TEST(NnSyncBatchNormOptions, InvalidValuesAreNamed) {
  auto make = [](nn::BatchNormOptions options, std::shared_ptr<ProcessGroup> group) {
    return [=] { SyncBatchNorm layer(options, group); };
  };
  EXPECT_NE(
      error_of<ConfigError>(make(nn::BatchNormOptions(3), nullptr)).find("process group is null"),
      std::string::npos);
  EXPECT_NE(error_of<ConfigError>(make(nn::BatchNormOptions(0), group_of_one()))
                .find("num_features is 0; it must be the (positive) number of channels"),
            std::string::npos);
  // Values print as a stream prints them (Note [Messages are built with str()]),
  // so a tiny offending value is shown as itself, not as 0.000000.
  EXPECT_NE(error_of<ConfigError>(make(nn::BatchNormOptions(3).eps(0), group_of_one()))
                .find("eps is 0; it must be positive (BatchNorm uses 1e-5)"),
            std::string::npos);
  EXPECT_NE(error_of<ConfigError>(make(nn::BatchNormOptions(3).eps(-1e-9), group_of_one()))
                .find("eps is -1e-09; it must be positive"),
            std::string::npos);
  EXPECT_NE(error_of<ConfigError>(make(nn::BatchNormOptions(3).momentum(1.5), group_of_one()))
                .find("momentum is 1.5; it must lie in [0, 1]"),
            std::string::npos);
}

TEST(NnSyncBatchNormInput, WrongRankOrChannelCountIsAnErrorNamingIt) {
  SyncBatchNorm layer(nn::BatchNormOptions(3), group_of_one());
  EXPECT_NE(error_of<InvalidArgumentError>([&] {
              layer->forward(torch::randn({3}));
            }).find("expected an input of 2 to 5 dimensions"),
            std::string::npos);
  EXPECT_NE(error_of<InvalidArgumentError>([&] {
              layer->forward(torch::randn({1, 3, 1, 1, 1, 2}));
            }).find("got 6 dimensions [1, 3, 1, 1, 1, 2]"),
            std::string::npos);
  EXPECT_NE(error_of<InvalidArgumentError>([&] {
              layer->forward(torch::randn({4, 2, 5}));
            }).find("the input has 2 channels (dimension 1) but the layer was built for 3"),
            std::string::npos);
}

TEST(NnSyncBatchNormModule, CloneIsIndependentAndPrettyPrintNamesTheOptions) {
  SyncBatchNorm layer(nn::BatchNormOptions(2).momentum(c10::nullopt), group_of_one());
  layer->forward(torch::randn({6, 2}) + 4);
  auto copy = std::dynamic_pointer_cast<SyncBatchNormImpl>(layer->clone());
  ASSERT_NE(copy, nullptr);
  EXPECT_TRUE(torch::equal(copy->running_mean, layer->running_mean));
  EXPECT_FALSE(copy->running_mean.is_same(layer->running_mean));
  EXPECT_EQ(copy->num_batches_tracked.item<int64_t>(), 1);
  std::ostringstream text;
  text << *layer;
  EXPECT_EQ(text.str(),
            "ddp::nn::SyncBatchNorm(2, eps=1e-05, momentum=None, affine=true, "
            "track_running_stats=true, world_size=1)");
}

// O1/O2 feed 16-bit activations into float32 batch norm: the output keeps
// the input's dtype, the statistics are float32.
TEST(NnSyncBatchNormModule, BFloat16InputWithFloatParametersMatchesBatchNorm) {
  torch::manual_seed(3);
  nn::BatchNorm2d reference(4);
  SyncBatchNorm layer(nn::BatchNormOptions(4), group_of_one());
  auto x = (torch::randn({3, 4, 5, 5}) * 2 + 1).to(torch::kBFloat16);
  auto got = layer->forward(x);
  EXPECT_EQ(got.scalar_type(), torch::kBFloat16);
  auto expected = reference->forward(x.to(torch::kFloat));
  EXPECT_LT((got.to(torch::kFloat) - expected).abs().max().item<float>(), 0.02f);
  EXPECT_TRUE(torch::allclose(layer->running_mean, reference->running_mean, 1e-5, 1e-5));
  EXPECT_TRUE(torch::allclose(layer->running_var, reference->running_var, 1e-5, 1e-5));
}

}  // namespace
}  // namespace ddp::testing

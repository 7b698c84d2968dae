#pragma once

// The models of the tutorials ddp's examples port, shared by the examples,
// the tests and the benchmarks.

#include <torch/torch.h>

#include "ddp/parallel/fully_sharded_units.hpp"

namespace ddp::examples {

/// The DDP tutorial's ConvNet for 28x28 grey images: two 5x5 convolutions
/// (1->16->32 channels, padding 2) each with batch norm, ReLU and 2x2
/// max-pooling, then a linear layer 32*7*7 = 1568 -> 10. Its forward calls
/// the three layers through ddp::sharded_call, so that
/// FullyShardedDataParallel with a wrap_policy picking them (mnist_ddp's
/// --shard full) runs each as a unit; outside FSDP those are plain calls.
struct ConvNetImpl : torch::nn::Module {
  ConvNetImpl()
      : layer1(register_module(
            "layer1",
            torch::nn::Sequential(
                torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 5).stride(1).padding(2)),
                torch::nn::BatchNorm2d(16), torch::nn::ReLU(),
                torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2).stride(2))))),
        layer2(register_module(
            "layer2",
            torch::nn::Sequential(
                torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 5).stride(1).padding(2)),
                torch::nn::BatchNorm2d(32), torch::nn::ReLU(),
                torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2).stride(2))))),
        fc(register_module("fc", torch::nn::Linear(7 * 7 * 32, 10))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = ddp::sharded_call(layer2, ddp::sharded_call(layer1, x));
    return ddp::sharded_call(fc, x.reshape({x.size(0), -1}));
  }

  torch::nn::Sequential layer1, layer2;
  torch::nn::Linear fc;
};
TORCH_MODULE(ConvNet);

/// LeNet-5 for 28x28 grey images: 5x5 convolutions 1->6 (padding 2) and
/// 6->16, each with ReLU and 2x2 max-pooling, then 400 -> 120 -> 84 -> 10.
/// Cloneable, so that ddp::DataParallel can make replicas of it.
struct LeNet5Impl : torch::nn::Cloneable<LeNet5Impl> {
  LeNet5Impl() { reset(); }

  void reset() override {
    conv1 =
        register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 6, 5).padding(2)));
    conv2 = register_module("conv2", torch::nn::Conv2d(6, 16, 5));
    fc1 = register_module("fc1", torch::nn::Linear(16 * 5 * 5, 120));
    fc2 = register_module("fc2", torch::nn::Linear(120, 84));
    fc3 = register_module("fc3", torch::nn::Linear(84, 10));
  }

  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1->forward(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2->forward(x)), 2);
    x = torch::relu(fc1->forward(x.flatten(1)));
    return fc3->forward(torch::relu(fc2->forward(x)));
  }

  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr}, fc3{nullptr};
};
TORCH_MODULE(LeNet5);

/// The network of Horovod's PyTorch MNIST example: 5x5 convolutions 1->10
/// and 10->20 (the second followed by channel dropout), each with 2x2
/// max-pooling and ReLU, then 320 -> 50 (ReLU, dropout) -> 10, returning
/// log-probabilities (train it with nll_loss).
struct HorovodNetImpl : torch::nn::Module {
  HorovodNetImpl()
      : conv1(register_module("conv1", torch::nn::Conv2d(1, 10, 5))),
        conv2(register_module("conv2", torch::nn::Conv2d(10, 20, 5))),
        conv2_drop(register_module("conv2_drop", torch::nn::Dropout2d())),
        fc1(register_module("fc1", torch::nn::Linear(320, 50))),
        fc2(register_module("fc2", torch::nn::Linear(50, 10))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = torch::relu(torch::max_pool2d(conv1->forward(x), 2));
    x = torch::relu(torch::max_pool2d(conv2_drop->forward(conv2->forward(x)), 2));
    x = torch::relu(fc1->forward(x.view({-1, 320})));
    x = torch::dropout(x, /*p=*/0.5, is_training());
    return torch::log_softmax(fc2->forward(x), /*dim=*/1);
  }

  torch::nn::Conv2d conv1, conv2;
  torch::nn::Dropout2d conv2_drop;
  torch::nn::Linear fc1, fc2;
};
TORCH_MODULE(HorovodNet);

/// A multi-layer perceptron: in -> hidden -> hidden -> out with ReLU.
struct MlpImpl : torch::nn::Module {
  MlpImpl(int64_t in, int64_t hidden, int64_t out)
      : fc1(register_module("fc1", torch::nn::Linear(in, hidden))),
        fc2(register_module("fc2", torch::nn::Linear(hidden, hidden))),
        fc3(register_module("fc3", torch::nn::Linear(hidden, out))) {}

  torch::Tensor forward(torch::Tensor x) {
    return fc3->forward(torch::relu(fc2->forward(torch::relu(fc1->forward(x)))));
  }

  torch::nn::Linear fc1, fc2, fc3;
};
TORCH_MODULE(Mlp);

}  // namespace ddp::examples

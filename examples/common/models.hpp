#pragma once

// The models of the tutorials ddp's examples port, shared by the examples,
// the tests and the benchmarks.

#include <torch/torch.h>

namespace ddp::examples {

/// The DDP tutorial's ConvNet for 28x28 grey images: two 5x5 convolutions
/// (1->16->32 channels, padding 2) each with batch norm, ReLU and 2x2
/// max-pooling, then a linear layer 32*7*7 = 1568 -> 10.
struct ConvNetImpl : torch::nn::Module {
  ConvNetImpl()
      : layer1(register_module(
            "layer1", torch::nn::Sequential(
                          torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 5).stride(1).padding(2)),
                          torch::nn::BatchNorm2d(16), torch::nn::ReLU(),
                          torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2).stride(2))))),
        layer2(register_module(
            "layer2", torch::nn::Sequential(
                          torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 5).stride(1).padding(2)),
                          torch::nn::BatchNorm2d(32), torch::nn::ReLU(),
                          torch::nn::MaxPool2d(torch::nn::MaxPool2dOptions(2).stride(2))))),
        fc(register_module("fc", torch::nn::Linear(7 * 7 * 32, 10))) {}

  torch::Tensor forward(torch::Tensor x) {
    x = layer2->forward(layer1->forward(x));
    return fc->forward(x.reshape({x.size(0), -1}));
  }

  torch::nn::Sequential layer1, layer2;
  torch::nn::Linear fc;
};
TORCH_MODULE(ConvNet);

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

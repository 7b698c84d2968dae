#pragma once

// ResNet-18 for 28x28 grey images (Fashion-MNIST), with the CIFAR-style stem
// (a 3x3 convolution, no max-pooling): the ResNet-18-sized model of the GPU
// benchmark. Parameter names follow torchvision's (conv1, bn1,
// layer1.0.conv1, ..., fc); 11.17 M parameters.

#include <torch/torch.h>

namespace ddp::examples {

/// Two 3x3 convolutions with batch norm, and a 1x1 convolution with batch
/// norm on the shortcut where the shape changes.
struct BasicBlockImpl : torch::nn::Module {
  BasicBlockImpl(int64_t in, int64_t out, int64_t stride)
      : conv1(register_module(
            "conv1",
            torch::nn::Conv2d(
                torch::nn::Conv2dOptions(in, out, 3).stride(stride).padding(1).bias(false)))),
        bn1(register_module("bn1", torch::nn::BatchNorm2d(out))),
        conv2(register_module(
            "conv2",
            torch::nn::Conv2d(torch::nn::Conv2dOptions(out, out, 3).padding(1).bias(false)))),
        bn2(register_module("bn2", torch::nn::BatchNorm2d(out))) {
    if (stride != 1 || in != out) {
      downsample = register_module(
          "downsample",
          torch::nn::Sequential(
              torch::nn::Conv2d(torch::nn::Conv2dOptions(in, out, 1).stride(stride).bias(false)),
              torch::nn::BatchNorm2d(out)));
    }
  }

  torch::Tensor forward(const torch::Tensor& x) {
    auto out = torch::relu(bn1->forward(conv1->forward(x)));
    out = bn2->forward(conv2->forward(out));
    return torch::relu(out + (downsample ? downsample->forward(x) : x));
  }

  torch::nn::Conv2d conv1;
  torch::nn::BatchNorm2d bn1;
  torch::nn::Conv2d conv2;
  torch::nn::BatchNorm2d bn2;
  torch::nn::Sequential downsample{nullptr};
};
TORCH_MODULE(BasicBlock);

/// ResNet-18: a 3x3 stem with 64 channels, four stages of two basic blocks
/// (64, 128, 256, 512 channels; strides 1, 2, 2, 2), global average
/// pooling and a linear layer to `classes`.
struct ResNet18Impl : torch::nn::Module {
  explicit ResNet18Impl(int64_t classes = 10)
      : conv1(register_module(
            "conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 64, 3).padding(1).bias(false)))),
        bn1(register_module("bn1", torch::nn::BatchNorm2d(64))),
        layer1(register_module("layer1", stage(64, 64, 1))),
        layer2(register_module("layer2", stage(64, 128, 2))),
        layer3(register_module("layer3", stage(128, 256, 2))),
        layer4(register_module("layer4", stage(256, 512, 2))),
        fc(register_module("fc", torch::nn::Linear(512, classes))) {}

  torch::Tensor forward(const torch::Tensor& x) {
    auto h = torch::relu(bn1->forward(conv1->forward(x)));
    h = layer4->forward(layer3->forward(layer2->forward(layer1->forward(h))));
    return fc->forward(torch::adaptive_avg_pool2d(h, {1, 1}).flatten(1));
  }

  // One statement per block: as constructor arguments the two blocks would be
  // built (and their weights drawn) in an unspecified order, and the weights
  // would no longer match PyTorch's torchvision-style model at one seed.
  static torch::nn::Sequential stage(int64_t in, int64_t out, int64_t stride) {
    torch::nn::Sequential blocks;
    blocks->push_back(BasicBlock(in, out, stride));
    blocks->push_back(BasicBlock(out, out, 1));
    return blocks;
  }

  torch::nn::Conv2d conv1;
  torch::nn::BatchNorm2d bn1;
  torch::nn::Sequential layer1, layer2, layer3, layer4;
  torch::nn::Linear fc;
};
TORCH_MODULE(ResNet18);

}  // namespace ddp::examples

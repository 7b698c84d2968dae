#pragma once

// What the examples in the public headers' comments (`/// \code` ...
// `/// \endcode`) take from their surroundings, so that each compiles as it
// is written. cmake/ExtractHeaderExamples.cmake makes every example the body
// of a member function of a struct derived from HeaderExampleContext; the
// struct is never constructed and the functions never called, so the members
// below are placeholders that need no value (a null group, an optimizer
// without parameters), and an example that declares one of these names
// itself shadows it. Examples are compiled outside namespace ddp, as a user's
// program is: they name ddp:: and torch:: in full.

#include <torch/torch.h>

#include <atomic>
#include <cstdint>
#include <iostream>
#include <memory>
#include <string>
#include <vector>

#include "ddp/data.hpp"
#include "ddp/ddp.hpp"
#include "ddp/elastic.hpp"
#include "ddp/hvd.hpp"
#include "ddp/snapshot.hpp"
#include "ddp/training.hpp"
#include "header_example_sources.hpp"

namespace header_examples {

/// A small classifier of 28x28 images, returning log-probabilities.
struct NetImpl : torch::nn::Module {
  NetImpl() : fc(register_module("fc", torch::nn::Linear(28 * 28, 10))) {}
  torch::Tensor forward(const torch::Tensor& x) { return torch::log_softmax(fc(x.flatten(1)), 1); }
  torch::nn::Linear fc;
};
TORCH_MODULE(Net);

/// A convolutional one, with a BatchNorm2d for SyncBatchNorm to replace.
struct ConvNetImpl : torch::nn::Module {
  ConvNetImpl()
      : conv(register_module("conv", torch::nn::Conv2d(1, 8, 3))),
        norm(register_module("norm", torch::nn::BatchNorm2d(8))),
        fc(register_module("fc", torch::nn::Linear(8 * 26 * 26, 10))) {}
  torch::Tensor forward(const torch::Tensor& x) {
    return torch::log_softmax(fc(torch::relu(norm(conv(x))).flatten(1)), 1);
  }
  torch::nn::Conv2d conv;
  torch::nn::BatchNorm2d norm;
  torch::nn::Linear fc;
};
TORCH_MODULE(ConvNet);

/// Batches of Fashion-MNIST, as torch::data::make_data_loader gives them.
using Loader = torch::data::StatelessDataLoader<
    torch::data::datasets::MapDataset<ddp::data::FashionMnist, torch::data::transforms::Stack<>>,
    torch::data::samplers::RandomSampler>;

/// A training program's body, for the examples that wrap one (error_file.hpp).
inline void train() {}

/// The placeholders.
struct HeaderExampleContext {
  std::shared_ptr<ddp::ProcessGroup> group;
  Net model, net;
  torch::optim::SGD optimizer;
  std::unique_ptr<Loader> loader;
  std::vector<torch::data::Example<>> batches, my_batches;
  torch::Tensor x, y, loss;
  torch::TensorOptions gpu;
  int64_t epoch, epochs, steps, steps_per_epoch, steps_to_run, global_batch;
  double accuracy;
  ddp::training::EpochProgress done;
  ddp::snapshot::TrainingState state;

  /// One training step of `model` (forward, backward, optimizer step) where
  /// an example leaves it out; returns the loss.
  template <typename Model>
  torch::Tensor train_step(Model& model) {
    return {};
  }
};

}  // namespace header_examples

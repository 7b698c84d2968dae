#pragma once

// Two ways the tests of ddp::optim move a model's and its optimizer's
// training state into another model and optimizer: torch::save and
// torch::load, or a ddp snapshot saved and resumed in a group of one.

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <functional>
#include <sstream>

#include "common/temporary_directory.hpp"
#include "ddp/comm/environment.hpp"
#include "ddp/comm/init.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"

namespace ddp::testing {

// Moves the training state of (model, saver) into (resumed, loader).
using StateTransfer =
    std::function<void(torch::nn::Sequential& model, torch::optim::Optimizer& saver,
                       torch::nn::Sequential& resumed, torch::optim::Optimizer& loader)>;

// torch::save of the optimizer, torch::load into the other; the parameters
// copied. LibTorch's load restores the state, not the param groups'
// options, so the loader is built with the saved ones, as a program would.
inline void through_torch_save(torch::nn::Sequential& model, torch::optim::Optimizer& saver,
                               torch::nn::Sequential& resumed, torch::optim::Optimizer& loader) {
  std::stringstream archive;
  torch::save(saver, archive);
  torch::load(loader, archive);
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < model->parameters().size(); ++i) {
    resumed->parameters()[i].copy_(model->parameters()[i]);
  }
}

// A ddp snapshot (model and optimizer) saved and resumed in a group of one.
inline void through_snapshot(torch::nn::Sequential& model, torch::optim::Optimizer& saver,
                             torch::nn::Sequential& resumed, torch::optim::Optimizer& loader) {
  const ddp::testing::TemporaryDirectory directory("ddp-optim-");
  auto group = ddp::init(ddp::InitOptions(), ddp::EnvironmentMap{});
  ddp::snapshot::SnapshotManager snapshots(ddp::snapshot::SnapshotOptions(directory.string()),
                                           group);
  ddp::snapshot::TrainingState saved;
  saved.model = model.ptr().get();
  saved.optimizer = &saver;
  snapshots.save(saved);
  ddp::snapshot::TrainingState state;
  state.model = resumed.ptr().get();
  state.optimizer = &loader;
  ASSERT_TRUE(snapshots.resume(state));
}

}  // namespace ddp::testing

#include "multiprocess/fsdp_snapshot_checks.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "common/named_checks.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/device_mesh.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/parallel/fully_sharded_data_parallel.hpp"
#include "ddp/parallel/fully_sharded_state.hpp"
#include "ddp/snapshot/consolidated_export.hpp"
#include "ddp/snapshot/errors.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"
#include "multiprocess/fsdp_snapshot_model.hpp"

namespace ddp::testing {
namespace {

namespace fs = std::filesystem;
namespace nn = torch::nn;
namespace optim = torch::optim;

using namespace fsdp_snapshot_model;  // NOLINT(google-build-using-namespace)

// The saving job's units are the Sequential's entries; the resuming job's
// one unit, the whole model: the snapshot is keyed by parameter names. The
// "-hybrid" phases shard within each node and replicate across them
// (Note [Replicated shards] in ddp/parallel/sharded_state.hpp).
FullyShardedDataParallelOptions units_for(const std::string& phase,
                                          const std::shared_ptr<ProcessGroup>& group) {
  auto options = phase.rfind("save", 0) == 0 ? FullyShardedDataParallelOptions()
                                             : FullyShardedDataParallelOptions().wrap_policy(
                                                   wrap_by_parameter_count(int64_t{1} << 40));
  if (is_hybrid(phase)) options.device_mesh(DeviceMesh::by_node(group));
  return options;
}

// An FSDP job's objects, as a training program holds them, with snapshots
// under `directory`.
struct ShardedRun {
  ShardedRun(uint64_t seed, const std::shared_ptr<ProcessGroup>& group,
             const std::string& directory, const std::string& phase)
      : net(make_net(seed)),
        model(net, units_for(phase, group), group),
        optimizer(decay_groups(model->named_parameters()), adamw_options()),
        sharded(model, optimizer),
        snapshots(snapshot::SnapshotOptions(directory).keep_last(1), group) {
    state.model = model->module().get();
    state.fully_sharded = &sharded;
  }
  nn::Sequential net;
  FullyShardedDataParallel model;
  optim::AdamW optimizer;
  FullyShardedState sharded;
  snapshot::SnapshotManager snapshots;
  snapshot::TrainingState state;
};

class FsdpSnapshotChecker {
 public:
  FsdpSnapshotChecker(std::shared_ptr<ProcessGroup> group, std::string directory, std::string phase)
      : group_(std::move(group)), directory_(std::move(directory)), phase_(std::move(phase)) {}

  // Steps [first, last) on this rank's rows of each batch.
  void train(FullyShardedDataParallel& model, optim::Optimizer& optimizer, int first, int last,
             const std::function<void(int)>& after_step) {
    const int world = group_->size(), rank = group_->rank();
    for (int step = first; step < last; ++step) {
      auto [x, y] = fsdp_batch_of(step);
      optimizer.zero_grad();
      torch::mse_loss(model->forward(x.chunk(world)[rank]), y.chunk(world)[rank]).backward();
      optimizer.step();
      after_step(step);
    }
  }

  // Saves after steps 3 and 4; with `in_background`, by save_async(), each
  // written while the next step (or the gather below) runs.
  void save(bool in_background) {
    ShardedRun run(kSavedSeed, group_, directory_, phase_);
    train(run.model, run.optimizer, 0, kFsdpSavedSteps, [&](int step) {
      if (step + 1 < kFsdpSavedSteps - 1) return;
      run.state.step_in_epoch = step + 1;
      if (in_background) {
        run.snapshots.save_async(run.state);
      } else {
        run.snapshots.save(run.state);
      }
    });
    if (in_background) run.snapshots.wait();
    const auto full = values_of(run.model->full_parameters());  // a collective
    if (group_->rank() == 0) {
      torch::save(full, (fs::path(directory_) / "full-parameters.pt").string());
      files_written();
    }
  }

  void resume() {
    ShardedRun run(77, group_, directory_, phase_);  // resuming must overwrite everything
    auto& [net, model, optimizer, sharded, snapshots, state] = run;
    const bool resumed = snapshots.resume(state);
    checks_.check(
        fsdp_snapshot_check::kResumed, resumed && state.step_in_epoch == kFsdpSavedSteps,
        "resumed " + std::to_string(resumed) + ", step " + std::to_string(state.step_in_epoch));
    std::vector<torch::Tensor> saved;
    torch::load(saved, (fs::path(directory_) / "full-parameters.pt").string());
    const auto now = values_of(model->full_parameters());
    bool equal = saved.size() == now.size();
    for (size_t i = 0; equal && i < now.size(); ++i) equal = torch::equal(saved[i], now[i]);
    checks_.check(fsdp_snapshot_check::kSameValues, equal, "they differ");
    const auto calls = net[1]->as<CallCounterImpl>()->calls.item<int64_t>();
    checks_.check(fsdp_snapshot_check::kBuffer, calls == kFsdpSavedSteps,
                  "calls = " + std::to_string(calls) + ", saved after step 4");

    train(model, optimizer, kFsdpSavedSteps, kFsdpSteps, [](int) {});
    const auto resumed_parameters = values_of(model->full_parameters());

    auto reference = make_net(kSavedSeed);
    optim::AdamW whole(decay_groups(reference->named_parameters()), adamw_options());
    for (int step = 0; step < kFsdpSteps; ++step) {
      auto [x, y] = fsdp_batch_of(step);
      whole.zero_grad();
      torch::mse_loss(reference->forward(x), y).backward();
      whole.step();
    }
    checks_.close_all(fsdp_snapshot_check::kMatchesOneProcess, resumed_parameters,
                      reference->parameters(), 1e-5);
    if (continues_saved_job(phase_, group_->size())) continues_exactly(resumed_parameters);
    plain_optimizer_refused(model);
    other_optimizer_refused(model);
    other_shape_refused();
    consolidated(model, net, resumed_parameters);
  }

  int failed() const { return checks_.failed(); }

 private:
  void files_written() {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(directory_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    const int world = group_->size();
    std::vector<std::string> expected = {"full-parameters.pt", "snapshot-000000000002.ddpsnap"};
    for (int r = 0; r < world; ++r) {
      expected.push_back("snapshot-000000000002.shard-" + std::to_string(r) + "-of-" +
                         std::to_string(world) + ".ddpsnap");
    }
    std::sort(expected.begin(), expected.end());
    std::string listed;
    for (const auto& name : names) listed += name + " ";
    const auto main = snapshot::read_snapshot_file(
        (fs::path(directory_) / "snapshot-000000000002.ddpsnap").string());
    std::string model_records;
    for (const auto& entry : main.tensors) {
      if (entry.first.rfind("model/", 0) == 0) model_records += entry.first + " ";
    }
    checks_.check(fsdp_snapshot_check::kFilesWritten,
                  names == expected && model_records == "model/buffer/1.calls ",
                  "found " + listed + "; model records: " + model_records);
    if (is_hybrid(phase_)) first_row_writes();
  }

  // Note [Replicated shards]: the first row's shards hold every element of
  // the parameters and of the optimizer state once; the second row's, none.
  void first_row_writes() {
    const int world = group_->size(), row = world / 2;
    std::vector<int64_t> elements(world, 0);
    for (int r = 0; r < world; ++r) {
      const auto shard = snapshot::read_snapshot_file(
          (fs::path(directory_) / ("snapshot-000000000002.shard-" + std::to_string(r) + "-of-" +
                                   std::to_string(world) + ".ddpsnap"))
              .string());
      for (const auto& [name, tensor] : shard.tensors) {
        if (name.rfind("value/", 0) == 0) elements[r] += tensor.numel();
      }
    }
    int64_t parameters = 0;
    for (const auto& p : make_net(kSavedSeed)->parameters()) parameters += p.numel();
    int64_t first = 0, second = 0;
    for (int r = 0; r < world; ++r) (r < row ? first : second) += elements[r];
    checks_.check(fsdp_snapshot_check::kFirstRowWrites, first == parameters && second == 0,
                  "parameter elements in the first row's shards " + std::to_string(first) +
                      ", the second's " + std::to_string(second) + ", the model's " +
                      std::to_string(parameters));
  }

  void continues_exactly(const std::vector<torch::Tensor>& resumed_parameters) {
    FullyShardedDataParallel model(make_net(kSavedSeed),
                                   units_for(is_hybrid(phase_) ? "save-hybrid" : "save", group_),
                                   group_);
    optim::AdamW optimizer(decay_groups(model->named_parameters()), adamw_options());
    train(model, optimizer, 0, kFsdpSteps, [](int) {});
    const auto uninterrupted = values_of(model->full_parameters());
    bool equal = uninterrupted.size() == resumed_parameters.size();
    for (size_t i = 0; equal && i < uninterrupted.size(); ++i) {
      equal = torch::equal(uninterrupted[i], resumed_parameters[i]);
    }
    checks_.check(fsdp_snapshot_check::kContinuesExactly, equal, "they differ");
  }

  // Exported after the 8 steps, into a fresh, unwrapped model.
  void consolidated(FullyShardedDataParallel& model, nn::Sequential& net,
                    const std::vector<torch::Tensor>& full) {
    const std::string path =
        (fs::path(directory_) / ("consolidated-" + std::to_string(group_->size()) + ".ddpsnap"))
            .string();
    int64_t largest_unit = 0;  // bytes of full parameters, padded
    const int64_t world = group_->size();
    for (int64_t numel : model->unit_numels()) {
      largest_unit = std::max<int64_t>(largest_unit, (numel + world - 1) / world * world * 4);
    }
    model->reset_peak_memory();
    snapshot::TrainingState extras;
    extras.epoch = 3;
    snapshot::save_consolidated(model, path, extras);
    const int64_t peak = model->memory().peak_gathered_bytes;
    auto plain = make_net(5);
    snapshot::TrainingState state;
    state.model = plain.ptr().get();
    snapshot::restore_training_state(snapshot::read_snapshot_file(path), state);
    const auto restored = plain->parameters();
    bool equal = restored.size() == full.size() && state.epoch == 3;
    for (size_t i = 0; equal && i < full.size(); ++i) equal = torch::equal(restored[i], full[i]);
    const auto calls = plain[1]->as<CallCounterImpl>()->calls.item<int64_t>();
    const auto live_calls = net[1]->as<CallCounterImpl>()->calls.item<int64_t>();
    checks_.check(fsdp_snapshot_check::kConsolidated,
                  equal && calls == live_calls && peak > 0 && peak <= largest_unit,
                  "parameters and epoch equal: " + std::to_string(equal) + ", buffer " +
                      std::to_string(calls) + " (live " + std::to_string(live_calls) + "), peak " +
                      std::to_string(peak) + " bytes (largest unit " +
                      std::to_string(largest_unit) + ")");
  }

  void plain_optimizer_refused(FullyShardedDataParallel& model) {
    optim::AdamW plain(model->parameters(), adamw_options());
    snapshot::TrainingState state;
    state.optimizer = &plain;
    std::string message;
    try {
      snapshot::SnapshotManager(snapshot::SnapshotOptions(directory_), group_).resume(state);
    } catch (const SnapshotError& e) {
      message = e.what();
    }
    checks_.check(fsdp_snapshot_check::kPlainRefused,
                  message.find("FullyShardedDataParallel's sharded state; resume it through "
                               "TrainingState::fully_sharded") != std::string::npos,
                  "message: '" + message + "'");
  }

  void other_optimizer_refused(FullyShardedDataParallel& model) {
    std::vector<torch::Tensor> others{torch::zeros({3}, torch::requires_grad())};
    optim::AdamW other(others, adamw_options());
    std::string message;
    try {
      FullyShardedState sharded(model, other);
    } catch (const ConfigError& e) {
      message = e.what();
    }
    checks_.check(fsdp_snapshot_check::kOtherOptimizerRefused,
                  message.find("the optimizer steps a tensor of shape [3] that is none of the "
                               "FullyShardedDataParallel's parameters()") != std::string::npos,
                  "message: '" + message + "'");
  }

  // A model whose last layer has another shape: the resume names it.
  void other_shape_refused() {
    torch::manual_seed(5);
    nn::Sequential net(nn::Linear(7, 13), CallCounter(), nn::ReLU(), nn::Linear(13, 9), nn::Tanh(),
                       nn::Linear(9, 6));
    FullyShardedDataParallel model(net, group_);
    optim::AdamW optimizer(decay_groups(model->named_parameters()), adamw_options());
    FullyShardedState sharded(model, optimizer);
    snapshot::TrainingState state;
    state.model = model->module().get();
    state.fully_sharded = &sharded;
    std::string message;
    try {
      snapshot::SnapshotManager(snapshot::SnapshotOptions(directory_), group_).resume(state);
    } catch (const SnapshotError& e) {
      message = e.what();
    }
    checks_.check(fsdp_snapshot_check::kOtherShapeRefused,
                  message.find("parameter '5.weight' has shape [5,9] in the sharded state and "
                               "[6,9] here") != std::string::npos,
                  "message: '" + message + "'");
  }

  std::shared_ptr<ProcessGroup> group_;
  std::string directory_;
  std::string phase_;
  NamedChecks checks_;
};

}  // namespace

int check_fsdp_snapshot(const std::shared_ptr<ProcessGroup>& group, const std::string& phase,
                        const std::string& directory) {
  FsdpSnapshotChecker checker(group, directory, phase);
  if (phase.rfind("save", 0) == 0) {
    checker.save(phase == "save-async");
  } else {
    checker.resume();
  }
  return checker.failed();
}

}  // namespace ddp::testing

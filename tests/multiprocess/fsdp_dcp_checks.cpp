#include "multiprocess/fsdp_dcp_checks.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "common/named_checks.hpp"
#include "ddp/comm/device_mesh.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/formats/dcp.hpp"
#include "ddp/formats/torch_file.hpp"
#include "ddp/parallel/fully_sharded_data_parallel.hpp"
#include "ddp/parallel/fully_sharded_state.hpp"
#include "ddp/parallel/zero_redundancy_optimizer.hpp"
#include "ddp/snapshot/consolidated_export.hpp"
#include "ddp/snapshot/distributed_checkpoint.hpp"
#include "ddp/snapshot/errors.hpp"
#include "ddp/snapshot/pytorch_checkpoint.hpp"
#include "multiprocess/fsdp_snapshot_model.hpp"

namespace ddp::testing {
namespace {

namespace fs = std::filesystem;
using namespace fsdp_snapshot_model;  // NOLINT(google-build-using-namespace)
using formats::PyRef;
using formats::PyValue;

// A unit per entry, or one unit; sharded within each row of `mesh` if any.
FullyShardedDataParallelOptions units(bool unit_per_entry, std::shared_ptr<DeviceMesh> mesh) {
  auto options = unit_per_entry ? FullyShardedDataParallelOptions()
                                : FullyShardedDataParallelOptions().wrap_policy(
                                      wrap_by_parameter_count(int64_t{1} << 40));
  return options.device_mesh(std::move(mesh));
}

// A sharded job: FSDP (a unit per entry, or one unit) with AdamW in the
// two groups, as a training program holds it.
struct DcpRun {
  DcpRun(uint64_t seed, const std::shared_ptr<ProcessGroup>& group, bool unit_per_entry,
         nn::Sequential sequential = nullptr, std::shared_ptr<DeviceMesh> mesh = nullptr)
      : net(sequential ? sequential : make_net(seed)),
        model(net, units(unit_per_entry, std::move(mesh)), group),
        optimizer(decay_groups(model->named_parameters()), adamw_options()),
        sharded(model, optimizer) {
    state.model = model->module().get();
    state.fully_sharded = &sharded;
  }
  // One step on this rank's rows of (x, y).
  void step(const torch::Tensor& x, const torch::Tensor& y) {
    const int world = model->process_group()->size(), rank = model->process_group()->rank();
    optimizer.zero_grad();
    torch::mse_loss(model->forward(x.chunk(world)[rank]), y.chunk(world)[rank]).backward();
    optimizer.step();
  }
  nn::Sequential net;
  FullyShardedDataParallel model;
  optim::AdamW optimizer;
  FullyShardedState sharded;
  snapshot::TrainingState state;
};

class FsdpDcpChecker {
 public:
  FsdpDcpChecker(std::shared_ptr<ProcessGroup> group, std::string directory)
      : group_(std::move(group)),
        directory_(std::move(directory)),
        checkpoint_((fs::path(directory_) / "dcp").string()) {}

  // `hybrid`: sharded within each node and replicated across them, the
  // first row writing the pieces (Note [Replicated shards]).
  void save(bool hybrid) {
    DcpRun run(kSavedSeed, group_, /*unit_per_entry=*/true, nullptr,
               hybrid ? DeviceMesh::by_node(group_) : nullptr);
    for (int step = 0; step < kFsdpSavedSteps; ++step) {
      auto [x, y] = fsdp_batch_of(step);
      run.step(x, y);
    }
    run.state.epoch = 1;
    run.state.step_in_epoch = kFsdpSavedSteps;
    snapshot::save_distributed_checkpoint(checkpoint_, run.state);
    const auto full = values_of(run.model->full_parameters());  // a collective
    // The same state consolidated, the optimizer's too, and exported for
    // PyTorch: dcp_peer.py compares it with dcp_to_torch_save's file.
    const std::string consolidated = (fs::path(directory_) / "consolidated.ddpsnap").string();
    snapshot::TrainingState extras;
    extras.epoch = 1;
    extras.step_in_epoch = kFsdpSavedSteps;
    extras.fully_sharded = &run.sharded;
    snapshot::save_consolidated(run.model, consolidated, extras);
    if (group_->rank() != 0) return;
    snapshot::export_checkpoint(snapshot::read_snapshot_file(consolidated),
                                (fs::path(directory_) / "consolidated.pt").string());
    write_list("full-parameters.pt", full);
    write_batches();
    files_written(hybrid);
  }

  void resume() {
    DcpRun run(77, group_, /*unit_per_entry=*/false);  // loading must overwrite everything
    std::string error;
    try {
      snapshot::load_distributed_checkpoint(checkpoint_, run.state);
    } catch (const std::exception& e) {
      error = e.what();
    }
    checks_.check(fsdp_dcp_check::kResumed,
                  error.empty() && run.state.epoch == 1 && run.state.step_in_epoch == 4,
                  "error '" + error + "', epoch " + std::to_string(run.state.epoch) + ", step " +
                      std::to_string(run.state.step_in_epoch));
    const auto saved = tensors_of(
        *formats::read_torch_file((fs::path(directory_) / "full-parameters.pt").string()));
    checks_.check(fsdp_dcp_check::kSameValues,
                  all_equal(values_of(run.model->full_parameters()), saved), "they differ");
    const auto calls = run.net[1]->as<CallCounterImpl>()->calls.item<int64_t>();
    checks_.check(fsdp_dcp_check::kBuffer, calls == kFsdpSavedSteps,
                  "calls = " + std::to_string(calls));
    auto reference = make_net(kSavedSeed);
    optim::AdamW whole(decay_groups(reference->named_parameters()), adamw_options());
    train_whole(reference, whole, 0, kFsdpSteps);
    consolidated_continues(run, reference->parameters());
    for (int step = kFsdpSavedSteps; step < kFsdpSteps; ++step) {
      auto [x, y] = fsdp_batch_of(step);
      run.step(x, y);
    }
    const auto resumed = values_of(run.model->full_parameters());
    checks_.close_all(fsdp_dcp_check::kMatchesOneProcess, resumed, reference->parameters(), 1e-5);
    if (group_->size() == 2) {
      DcpRun uninterrupted(kSavedSeed, group_, /*unit_per_entry=*/true);
      for (int step = 0; step < kFsdpSteps; ++step) {
        auto [x, y] = fsdp_batch_of(step);
        uninterrupted.step(x, y);
      }
      checks_.check(fsdp_dcp_check::kContinuesExactly,
                    all_equal(values_of(uninterrupted.model->full_parameters()), resumed),
                    "they differ");
    }
    if (group_->rank() == 0) {
      write_list("ddp-final-" + std::to_string(group_->size()) + ".pt", resumed);
    }
    refusals();
  }

  // ZeroRedundancyOptimizer (stage 2, AdamW in one group) saved as DCP at 2
  // ranks; the job goes on 4 steps (DIR/ddp-zero-final.pt) for dcp_peer.py
  // to compare with.
  void save_zero() {
    auto net = make_net(kSavedSeed);
    ZeroRedundancyOptimizer zero(net->parameters(), zero_optimizer<optim::AdamW>(adamw_options()),
                                 ZeroRedundancyOptimizerOptions().stage(2), group_);
    const int world = group_->size(), rank = group_->rank();
    auto train = [&](int first, int last) {
      for (int step = first; step < last; ++step) {
        auto [x, y] = fsdp_batch_of(step);
        zero.zero_grad();
        torch::mse_loss(net->forward(x.chunk(world)[rank]), y.chunk(world)[rank]).backward();
        zero.step();
      }
    };
    train(0, kFsdpSavedSteps);
    snapshot::TrainingState state;
    state.model = net.ptr().get();
    state.zero_optimizer = &zero;
    state.epoch = 1;
    state.step_in_epoch = kFsdpSavedSteps;
    const std::string checkpoint = (fs::path(directory_) / "dcp-zero").string();
    snapshot::save_distributed_checkpoint(checkpoint, state);
    train(kFsdpSavedSteps, kFsdpSteps);
    if (rank != 0) return;
    write_list("ddp-zero-final.pt", net->parameters());
    write_batches();
    const formats::DcpMetadata metadata = formats::read_dcp_metadata(checkpoint);
    checks_.check(fsdp_dcp_check::kZeroSaved,
                  metadata.tensors.count("model.0.weight") &&
                      metadata.tensors.count("optim.state.0.weight.exp_avg_sq") &&
                      metadata.objects.count("optim.param_groups.0.params"),
                  "the metadata lacks a parameter, its state or the param group");
  }

  void load_pytorch() {
    for (const std::string variant : {"plain", "fsdp1"}) {
      const std::string name =
          variant == "plain" ? fsdp_dcp_check::kPyTorchPlain : fsdp_dcp_check::kPyTorchFsdp1;
      const PyRef reference =
          formats::read_torch_file((fs::path(directory_) / ("pt-" + variant + "-ref.pt")).string());
      DcpRun run(77, group_, /*unit_per_entry=*/variant == "plain");
      std::string error;
      try {
        snapshot::load_distributed_checkpoint((fs::path(directory_) / ("pt-" + variant)).string(),
                                              run.state);
      } catch (const std::exception& e) {
        error = e.what();
      }
      const bool same =
          error.empty() && run.state.epoch == 2 &&
          all_equal(values_of(run.model->full_parameters()), tensors_of(*reference->get("params")));
      const auto xs = tensors_of(*reference->get("x")), ys = tensors_of(*reference->get("y"));
      for (size_t i = 0; i < xs.size(); ++i) run.step(xs[i], ys[i]);
      const auto after = values_of(run.model->full_parameters());
      if (!same) {
        checks_.check(name, false, "loading: '" + error + "' or the values differ");
      } else {
        checks_.close_all(name, after, tensors_of(*reference->get("next")), 1e-5);
      }
    }
  }

  int failed() const { return checks_.failed(); }

 private:
  // `tensors` as a list in DIR/`name`, for dcp_peer.py and later phases.
  void write_list(const std::string& name, const std::vector<torch::Tensor>& tensors) const {
    auto list = PyValue::list();
    for (const auto& t : tensors) list->items.push_back(PyValue::of(t));
    formats::write_torch_file((fs::path(directory_) / name).string(), *list);
  }
  // The batches of steps 4..7, x and y by turns, in DIR/batches.pt.
  void write_batches() const {
    std::vector<torch::Tensor> batches;
    for (int step = kFsdpSavedSteps; step < kFsdpSteps; ++step) {
      auto [x, y] = fsdp_batch_of(step);
      batches.push_back(x);
      batches.push_back(y);
    }
    write_list("batches.pt", batches);
  }

  // One process, the whole batch: steps [first, last).
  static void train_whole(nn::Sequential& net, optim::Optimizer& optimizer, int first, int last) {
    for (int step = first; step < last; ++step) {
      auto [x, y] = fsdp_batch_of(step);
      optimizer.zero_grad();
      torch::mse_loss(net->forward(x), y).backward();
      optimizer.step();
    }
  }

  // Point 5 of issue 55: the loaded job consolidated with its optimizer,
  // restored into a plain model and AdamW, trains on as one process does.
  void consolidated_continues(DcpRun& run, const std::vector<torch::Tensor>& reference) {
    const std::string path =
        (fs::path(directory_) / ("consolidated-" + std::to_string(group_->size()) + ".ddpsnap"))
            .string();
    snapshot::TrainingState extras;
    extras.fully_sharded = &run.sharded;
    snapshot::save_consolidated(run.model, path, extras);
    if (group_->rank() != 0) return;
    auto plain = make_net(5);
    optim::AdamW optimizer(decay_groups(plain->named_parameters()), adamw_options());
    snapshot::TrainingState state;
    state.model = plain.ptr().get();
    state.optimizer = &optimizer;
    snapshot::restore_training_state(snapshot::read_snapshot_file(path), state);
    train_whole(plain, optimizer, kFsdpSavedSteps, kFsdpSteps);
    checks_.close_all(fsdp_dcp_check::kConsolidatedContinues, plain->parameters(), reference, 1e-5);
  }

  void files_written(bool hybrid) {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(checkpoint_)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    std::vector<std::string> expected = {".metadata", "__0_1.distcp"};
    for (int r = 0; r < group_->size(); ++r) {
      expected.push_back("__" + std::to_string(r) + "_0.distcp");
    }
    std::sort(expected.begin(), expected.end());
    std::string listed;
    for (const auto& name : names) listed += name + " ";
    const formats::DcpMetadata metadata = formats::read_dcp_metadata(checkpoint_);
    const auto weight = metadata.tensors.find("model.0.weight");
    int64_t chunked = 0;  // each element once: a replica row writes none
    if (weight != metadata.tensors.end()) {
      for (const auto& chunk : weight->second.chunks) chunked += chunk.box.numel();
    }
    const bool described =
        weight != metadata.tensors.end() && weight->second.size == std::vector<int64_t>{13, 7} &&
        weight->second.chunks.size() >= 2 && chunked == 13 * 7 &&
        metadata.tensors.count("optim.state.5.bias.exp_avg") &&
        metadata.tensors.count("optim.state.5.bias.step") &&
        metadata.objects.count("optim.param_groups.1.params") && metadata.objects.count("epoch") &&
        metadata.tensors.count("model.1.calls");
    // On a mesh the second row's files hold nothing (Note [Replicated shards]).
    uintmax_t second_row = 0;
    for (int r = hybrid ? group_->size() / 2 : group_->size(); r < group_->size(); ++r) {
      const fs::path file = fs::path(checkpoint_) / ("__" + std::to_string(r) + "_0.distcp");
      if (fs::exists(file)) second_row += fs::file_size(file);
    }
    checks_.check(fsdp_dcp_check::kFilesWritten, names == expected && described && second_row == 0,
                  "found " + listed + "; described " + std::to_string(described) +
                      "; elements of model.0.weight's chunks " + std::to_string(chunked) +
                      "; bytes in the second row's files " + std::to_string(second_row));
  }

  template <typename Action>
  std::string message_of(Action action) {
    try {
      action();
    } catch (const SnapshotError& e) {
      return e.what();
    } catch (const std::exception& e) {
      return std::string("another exception: ") + e.what();
    }
    return "no error";
  }

  void refusals() {
    torch::manual_seed(5);
    DcpRun other(5, group_, true,
                 nn::Sequential(nn::Linear(7, 13), CallCounter(), nn::ReLU(), nn::Linear(13, 9),
                                nn::Tanh(), nn::Linear(9, 6)));
    const std::string shape =
        message_of([&] { snapshot::load_distributed_checkpoint(checkpoint_, other.state); });
    checks_.check(
        fsdp_dcp_check::kOtherShapeRefused,
        shape.find("model.5.weight has the shape [5, 9] in the checkpoint, [6, 9] here") !=
            std::string::npos,
        "message: '" + shape + "'");

    FullyShardedDataParallel model(make_net(5), group_);
    // SGD in the checkpoint's two groups (weights, biases), so that only
    // the optimizer's type differs.
    std::vector<optim::OptimizerParamGroup> sgd_groups;
    for (const bool biases : {false, true}) {
      std::vector<torch::Tensor> params;
      for (const auto& item : model->named_parameters()) {
        const std::string& name = item.key();
        if ((name.size() >= 4 && name.substr(name.size() - 4) == "bias") == biases) {
          params.push_back(item.value());
        }
      }
      sgd_groups.emplace_back(
          params, std::make_unique<optim::SGDOptions>(optim::SGDOptions(0.1).momentum(0.9)));
    }
    optim::SGD sgd(std::move(sgd_groups), optim::SGDOptions(0.1).momentum(0.9));
    FullyShardedState sharded(model, sgd);
    snapshot::TrainingState state;
    state.model = model->module().get();
    state.fully_sharded = &sharded;
    const std::string type =
        message_of([&] { snapshot::load_distributed_checkpoint(checkpoint_, state); });
    checks_.check(
        fsdp_dcp_check::kOtherOptimizerRefused,
        type.find("which sgd has: the file holds Adam's or AdamW's state") != std::string::npos,
        "message: '" + type + "'");

    // AdamW in one group, where the checkpoint has two (no decay on biases).
    FullyShardedDataParallel one_group_model(make_net(5), group_);
    optim::AdamW one_group(one_group_model->parameters(), adamw_options());
    FullyShardedState one_group_sharded(one_group_model, one_group);
    snapshot::TrainingState one_group_state;
    one_group_state.model = one_group_model->module().get();
    one_group_state.fully_sharded = &one_group_sharded;
    const std::string mixed =
        message_of([&] { snapshot::load_distributed_checkpoint(checkpoint_, one_group_state); });
    checks_.check(
        fsdp_dcp_check::kMixedGroupsRefused,
        mixed.find("parameter 0.bias is in the checkpoint's param group 1, but this "
                   "optimizer's group 0 also holds parameters of its group 0") != std::string::npos,
        "message: '" + mixed + "'");

    const std::string none = message_of([&] {
      snapshot::load_distributed_checkpoint((fs::path(directory_) / "nothing").string(), state);
    });
    checks_.check(fsdp_dcp_check::kNoCheckpointRefused,
                  none.find("it has no .metadata") != std::string::npos, "message: '" + none + "'");
  }

  std::shared_ptr<ProcessGroup> group_;
  std::string directory_;
  std::string checkpoint_;
  NamedChecks checks_;
};

}  // namespace

int check_fsdp_dcp(const std::shared_ptr<ProcessGroup>& group, const std::string& phase,
                   const std::string& directory) {
  FsdpDcpChecker checker(group, directory);
  if (phase == "save" || phase == "save-hybrid") {
    checker.save(phase == "save-hybrid");
  } else if (phase == "resume") {
    checker.resume();
  } else if (phase == "save-zero") {
    checker.save_zero();
  } else {
    checker.load_pytorch();
  }
  return checker.failed();
}

}  // namespace ddp::testing

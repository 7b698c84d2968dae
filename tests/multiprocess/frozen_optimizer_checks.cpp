#include "multiprocess/frozen_optimizer_checks.hpp"

#include <torch/torch.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "common/named_checks.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/formats/dcp.hpp"
#include "ddp/formats/torch_file.hpp"
#include "ddp/parallel/distributed_data_parallel.hpp"
#include "ddp/parallel/fully_sharded_data_parallel.hpp"
#include "ddp/parallel/fully_sharded_state.hpp"
#include "ddp/parallel/zero_redundancy_optimizer.hpp"
#include "ddp/snapshot/consolidated_export.hpp"
#include "ddp/snapshot/distributed_checkpoint.hpp"
#include "ddp/snapshot/errors.hpp"
#include "ddp/snapshot/pytorch_checkpoint.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"
#include "multiprocess/fsdp_snapshot_model.hpp"

namespace ddp::testing {
namespace {

namespace fs = std::filesystem;
using namespace fsdp_snapshot_model;  // NOLINT(google-build-using-namespace)
using formats::PyRef;
using formats::PyValue;

// How a job holds the model and its optimizer.
enum class Way {
  kFsdp,       // FSDP, AdamW over the trainable parameters in two groups
  kFsdpEvery,  // FSDP, AdamW over every parameter, the frozen ones too
  kZero,       // ZeRO-2 over the trainable parameters, AdamW in one group
  kDdp,        // DDP, a plain AdamW over the trainable parameters in two groups
};

std::vector<torch::Tensor> copies(const std::vector<torch::Tensor>& tensors) {
  std::vector<torch::Tensor> result;
  for (const auto& t : tensors) result.push_back(t.detach().clone());
  return result;
}

// One process, the whole batch: steps [first, last).
void train_whole(nn::Sequential& net, optim::Optimizer& optimizer, int first, int last) {
  for (int step = first; step < last; ++step) {
    auto [x, y] = fsdp_batch_of(step);
    optimizer.zero_grad();
    torch::mse_loss(net->forward(x), y).backward();
    optimizer.step();
  }
}

// One process's parameters after `steps` steps from the saved seed, AdamW
// over the trainable parameters in two groups, or in one (ZeRO's).
std::vector<torch::Tensor> one_process(int steps, bool one_group) {
  auto net = make_frozen_net(kSavedSeed);
  auto trained = trainable(net->named_parameters());
  auto optimizer = one_group
                       ? std::make_unique<optim::AdamW>(trained.values(), adamw_options())
                       : std::make_unique<optim::AdamW>(decay_groups(trained), adamw_options());
  train_whole(net, *optimizer, 0, steps);
  return copies(net->parameters());
}

// A job of one Way, as a training program holds it.
struct FrozenRun {
  FrozenRun(Way way, uint64_t seed, const std::shared_ptr<ProcessGroup>& group)
      : group(group), net(make_frozen_net(seed)) {
    if (way == Way::kFsdp || way == Way::kFsdpEvery) {
      fsdp = FullyShardedDataParallel(net, group);
      const auto named = fsdp->named_parameters();
      plain = std::make_unique<optim::AdamW>(
          decay_groups(way == Way::kFsdp ? trainable(named) : named), adamw_options());
      sharded = std::make_unique<FullyShardedState>(fsdp, *plain);
      state.model = fsdp->module().get();
      state.fully_sharded = sharded.get();
    } else if (way == Way::kZero) {
      zero = std::make_unique<ZeroRedundancyOptimizer>(
          trainable(net->named_parameters()).values(),
          zero_optimizer<optim::AdamW>(adamw_options()), ZeroRedundancyOptimizerOptions().stage(2),
          group);
      state.model = net.ptr().get();
      state.zero_optimizer = zero.get();
    } else {
      ddp = DistributedDataParallel(net, group);
      plain = std::make_unique<optim::AdamW>(decay_groups(trainable(net->named_parameters())),
                                             adamw_options());
      state.model = net.ptr().get();
      state.optimizer = plain.get();
    }
  }
  // One step on this rank's rows of step `step`'s batch.
  void step(const torch::Tensor& x, const torch::Tensor& y) {
    const int world = group->size(), rank = group->rank();
    if (zero) {
      zero->zero_grad();
    } else {
      plain->zero_grad();
    }
    const torch::Tensor mine = x.chunk(world)[rank];
    const torch::Tensor out =
        fsdp ? fsdp->forward(mine) : (ddp ? ddp->forward(mine) : net->forward(mine));
    torch::mse_loss(out, y.chunk(world)[rank]).backward();
    if (zero) {
      zero->step();
    } else {
      plain->step();
    }
  }
  void train(int first, int last) {
    for (int s = first; s < last; ++s) {
      auto [x, y] = fsdp_batch_of(s);
      step(x, y);
    }
  }
  // Every parameter in full, in the model's order (a collective under FSDP).
  std::vector<torch::Tensor> parameters() {
    return fsdp ? values_of(fsdp->full_parameters()) : copies(net->parameters());
  }

  std::shared_ptr<ProcessGroup> group;
  nn::Sequential net;
  FullyShardedDataParallel fsdp{nullptr};
  DistributedDataParallel ddp{nullptr};
  std::unique_ptr<optim::AdamW> plain;
  std::unique_ptr<FullyShardedState> sharded;
  std::unique_ptr<ZeroRedundancyOptimizer> zero;
  snapshot::TrainingState state;
};

class FrozenOptimizerChecker {
 public:
  FrozenOptimizerChecker(std::shared_ptr<ProcessGroup> group, std::string directory)
      : group_(std::move(group)), directory_(std::move(directory)) {}

  void save() {
    for (const Way way : {Way::kFsdp, Way::kFsdpEvery, Way::kZero, Way::kDdp}) {
      FrozenRun run(way, kSavedSeed, group_);
      run.train(0, kFsdpSavedSteps);
      run.state.epoch = 1;
      run.state.step_in_epoch = kFsdpSavedSteps;
      snapshot::SnapshotManager(snapshot::SnapshotOptions(path(snapshot_of(way))), group_)
          .save(run.state);
      if (way == Way::kFsdp || way == Way::kZero) {
        snapshot::save_distributed_checkpoint(path(way == Way::kFsdp ? "dcp" : "dcp-zero"),
                                              run.state);
      }
      if (way == Way::kFsdp) {
        snapshot::TrainingState extras;
        extras.epoch = 1;
        extras.step_in_epoch = kFsdpSavedSteps;
        extras.fully_sharded = run.sharded.get();
        snapshot::save_consolidated(run.fsdp, path("consolidated.ddpsnap"), extras);
      }
    }
    if (group_->rank() != 0) return;
    snapshot::export_checkpoint(snapshot::read_snapshot_file(path("consolidated.ddpsnap")),
                                path("consolidated.pt"));
    write_list("ddp-final-1.pt", one_process(kFsdpSteps, /*one_group=*/false));
    write_list("ddp-zero-final.pt", one_process(kFsdpSteps, /*one_group=*/true));
    std::vector<torch::Tensor> batches;
    for (int step = kFsdpSavedSteps; step < kFsdpSteps; ++step) {
      auto [x, y] = fsdp_batch_of(step);
      batches.push_back(x);
      batches.push_back(y);
    }
    write_list("batches.pt", batches);
    checkpoint_described();
  }

  void resume() {
    using namespace frozen_optimizer_check;  // NOLINT(google-build-using-namespace)
    resumes(kFsdpSnapshot, Way::kFsdp, "fsdp", /*dcp=*/false);
    resumes(kFsdpCheckpoint, Way::kFsdp, "dcp", /*dcp=*/true);
    resumes(kFsdpSnapshotIntoEveryParameter, Way::kFsdpEvery, "fsdp", /*dcp=*/false);
    resumes(kFsdpEverySnapshotIntoTrainable, Way::kFsdp, "fsdp-every", /*dcp=*/false);
    resumes(kZeroSnapshot, Way::kZero, "zero", /*dcp=*/false);
    resumes(kZeroCheckpoint, Way::kZero, "dcp-zero", /*dcp=*/true);
    resumes(kDdpSnapshot, Way::kDdp, "ddp", /*dcp=*/false);

    FrozenRun every(Way::kFsdpEvery, 77, group_);
    std::string message = "no error";
    try {
      snapshot::load_distributed_checkpoint(path("dcp"), every.state);
    } catch (const SnapshotError& e) {
      message = e.what();
    }
    checks_.check(
        kEveryParameterRefused,
        message.find("parameter 0.weight is in none of the checkpoint's param groups: "
                     "the job that saved it left it out of its optimizer") != std::string::npos &&
            message.find("leave it out of this one too") != std::string::npos,
        "message: '" + message + "'");
    if (group_->rank() == 0) consolidated_continues();
  }

  void load_pytorch() {
    for (const std::string variant : {"plain", "fsdp1"}) {
      const std::string name = variant == "plain" ? frozen_optimizer_check::kPyTorchPlain
                                                  : frozen_optimizer_check::kPyTorchFsdp1;
      const PyRef reference = formats::read_torch_file(path("pt-" + variant + "-ref.pt"));
      FrozenRun run(Way::kFsdp, 77, group_);
      std::string error;
      try {
        snapshot::load_distributed_checkpoint(path("pt-" + variant), run.state);
      } catch (const std::exception& e) {
        error = e.what();
      }
      const bool same = error.empty() && run.state.epoch == 2 &&
                        all_equal(run.parameters(), tensors_of(*reference->get("params")));
      const auto xs = tensors_of(*reference->get("x")), ys = tensors_of(*reference->get("y"));
      for (size_t i = 0; i < xs.size(); ++i) run.step(xs[i], ys[i]);
      const auto after = run.parameters();
      if (!same) {
        checks_.check(name, false, "loading: '" + error + "' or the values differ");
      } else {
        checks_.close_all(name, after, tensors_of(*reference->get("next")), 1e-5);
      }
    }
  }

  int failed() const { return checks_.failed(); }

 private:
  static std::string snapshot_of(Way way) {
    switch (way) {
      case Way::kFsdp:
        return "fsdp";
      case Way::kFsdpEvery:
        return "fsdp-every";
      case Way::kZero:
        return "zero";
      case Way::kDdp:
        return "ddp";
    }
    return "";
  }

  std::string path(const std::string& name) const { return (fs::path(directory_) / name).string(); }

  void write_list(const std::string& name, const std::vector<torch::Tensor>& tensors) const {
    auto list = PyValue::list();
    for (const auto& t : tensors) list->items.push_back(PyValue::of(t));
    formats::write_torch_file(path(name), *list);
  }

  // A job resumed `way` from DIR/`saved` (a snapshot, or a distributed
  // checkpoint), checked against one process: the frozen weights as built
  // (the job starts from another seed), and 4 more steps.
  void resumes(const std::string& name, Way way, const std::string& saved, bool dcp) {
    FrozenRun run(way, 77, group_);
    std::string error;
    try {
      if (dcp) {
        snapshot::load_distributed_checkpoint(path(saved), run.state);
      } else if (!snapshot::SnapshotManager(snapshot::SnapshotOptions(path(saved)), group_)
                      .resume(run.state)) {
        error = "no snapshot to resume";
      }
    } catch (const std::exception& e) {
      error = e.what();
    }
    const auto loaded = run.parameters();
    const auto built = make_net(kSavedSeed)->parameters();
    const bool frozen_as_built = loaded.size() == built.size() &&
                                 torch::equal(loaded[0], built[0]) &&
                                 torch::equal(loaded[1], built[1]);
    run.train(kFsdpSavedSteps, kFsdpSteps);
    const auto after = run.parameters();
    if (!error.empty() || run.state.step_in_epoch != kFsdpSavedSteps || !frozen_as_built) {
      checks_.check(name, false,
                    "error '" + error + "', step " + std::to_string(run.state.step_in_epoch) +
                        ", frozen weights as built: " + std::to_string(frozen_as_built));
      return;
    }
    checks_.close_all(name, after, one_process(kFsdpSteps, way == Way::kZero), 1e-5);
  }

  // The consolidated export of the saving job, restored into one process.
  void consolidated_continues() {
    auto plain = make_frozen_net(5);
    optim::AdamW optimizer(decay_groups(trainable(plain->named_parameters())), adamw_options());
    snapshot::TrainingState state;
    state.model = plain.ptr().get();
    state.optimizer = &optimizer;
    std::string error;
    try {
      snapshot::restore_training_state(snapshot::read_snapshot_file(path("consolidated.ddpsnap")),
                                       state);
    } catch (const std::exception& e) {
      error = e.what();
    }
    if (!error.empty()) {
      checks_.check(frozen_optimizer_check::kConsolidatedContinues, false, "error '" + error + "'");
      return;
    }
    train_whole(plain, optimizer, kFsdpSavedSteps, kFsdpSteps);
    checks_.close_all(frozen_optimizer_check::kConsolidatedContinues, plain->parameters(),
                      one_process(kFsdpSteps, false), 1e-5);
  }

  void checkpoint_described() {
    const formats::DcpMetadata metadata = formats::read_dcp_metadata(path("dcp"));
    const auto weight = metadata.tensors.find("model.0.weight");
    int64_t chunked = 0;
    if (weight != metadata.tensors.end()) {
      for (const auto& chunk : weight->second.chunks) chunked += chunk.box.numel();
    }
    std::string frozen_state;
    for (const auto& [key, tensor] : metadata.tensors) {
      if (key.rfind("optim.state.0.", 0) == 0) frozen_state += key + " ";
    }
    std::string grouped;
    formats::DcpReader reader(path("dcp"));
    for (int g = 0; g < 2; ++g) {
      const PyRef names = reader.read_object("optim.param_groups." + std::to_string(g) + ".params");
      for (const auto& item : names->items) grouped += item->text + " ";
    }
    const bool ok = chunked == 13 * 7 && metadata.tensors.count("model.0.bias") &&
                    metadata.tensors.count("optim.state.3.weight.exp_avg") &&
                    frozen_state.empty() && grouped == "3.weight 5.weight 3.bias 5.bias ";
    checks_.check(frozen_optimizer_check::kCheckpointHoldsTheFrozenWeights, ok,
                  "elements of model.0.weight's chunks " + std::to_string(chunked) +
                      "; optimizer state of the frozen layer: '" + frozen_state +
                      "'; the param groups list '" + grouped + "'");
  }

  std::shared_ptr<ProcessGroup> group_;
  std::string directory_;
  NamedChecks checks_;
};

}  // namespace

int check_frozen_optimizer(const std::shared_ptr<ProcessGroup>& group, const std::string& phase,
                           const std::string& directory) {
  FrozenOptimizerChecker checker(group, directory);
  if (phase == "save") {
    checker.save();
  } else if (phase == "resume") {
    checker.resume();
  } else {
    checker.load_pytorch();
  }
  return checker.failed();
}

}  // namespace ddp::testing

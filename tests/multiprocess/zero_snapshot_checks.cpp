#include "multiprocess/zero_snapshot_checks.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "common/named_checks.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/parallel/distributed_data_parallel.hpp"
#include "ddp/parallel/zero_redundancy_optimizer.hpp"
#include "ddp/snapshot/distributed_checkpoint.hpp"
#include "ddp/snapshot/errors.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"
#include "multiprocess/zero_net.hpp"

namespace ddp::testing {
namespace {

namespace fs = std::filesystem;
namespace nn = torch::nn;
namespace optim = torch::optim;

constexpr int64_t kSnapshotBatch = 12;  // divides evenly over 1, 2 and 3 ranks
constexpr int kSnapshotSavedSteps = 4;
constexpr int kSnapshotSteps = 8;

std::pair<torch::Tensor, torch::Tensor> batch_of(int step) {
  torch::manual_seed(900 + step);
  return {torch::randn({kSnapshotBatch, 8}), torch::randn({kSnapshotBatch, 4})};
}

struct Case {
  std::string name;
  int stage;
  ZeroOptimizerFactory factory;
  int64_t state_per_element;  // bytes of state per float32 element
};

std::vector<Case> cases() {
  return {{zero_snapshot_check::kStage1Adam, 1,
           zero_optimizer<optim::Adam>(optim::AdamOptions(1e-2).weight_decay(1e-2)), 8},
          {zero_snapshot_check::kStage2Sgd, 2,
           zero_optimizer<optim::SGD>(optim::SGDOptions(0.05).momentum(0.9)), 4}};
}

class ZeroSnapshotChecker {
 public:
  ZeroSnapshotChecker(std::shared_ptr<ProcessGroup> group, std::string directory)
      : group_(std::move(group)), directory_(std::move(directory)) {}

  // Trains steps [first, last) of `c` on this rank's part of each batch;
  // `after_step` runs after each.
  void train(const Case& c, ZeroNet& net, ZeroRedundancyOptimizer& optimizer,
             const std::shared_ptr<DistributedDataParallel>& model, int first, int last,
             const std::function<void(int)>& after_step) {
    const int world = group_->size(), rank = group_->rank();
    for (int step = first; step < last; ++step) {
      auto [x, y] = batch_of(step);
      optimizer.zero_grad();
      const at::Tensor input = x.chunk(world)[rank];
      const at::Tensor output = c.stage == 1 ? (*model)->forward(input) : net->forward(input);
      torch::mse_loss(output, y.chunk(world)[rank]).backward();
      optimizer.step();
      after_step(step);
    }
  }

  // With `dcp`, the state goes through save_distributed_checkpoint() and
  // load_distributed_checkpoint() instead of snapshots.
  void run(const Case& c, bool save, bool dcp) {
    const std::string dir = (fs::path(directory_) / std::to_string(c.stage)).string();
    torch::manual_seed(save ? 31 : 77);  // resuming must overwrite everything
    ZeroNet net;
    std::shared_ptr<DistributedDataParallel> model;
    if (c.stage == 1) {
      model = std::make_shared<DistributedDataParallel>(
          net, DistributedDataParallelOptions().find_unused_parameters(true), group_);
    }
    // Stage 2 saves from two buckets and resumes into one: the snapshot
    // records pieces of parameters, not a layout.
    const double cap_mb = save && c.stage == 2 ? kTwoBucketsCapMb : 25;
    ZeroRedundancyOptimizer optimizer(
        net->parameters(), c.factory,
        ZeroRedundancyOptimizerOptions().stage(c.stage).bucket_cap_mb(cap_mb), group_);
    snapshot::SnapshotManager snapshots(snapshot::SnapshotOptions(dir).keep_last(1), group_);
    snapshot::TrainingState state;
    state.model = net.ptr().get();
    state.zero_optimizer = &optimizer;
    const std::string checkpoint = (fs::path(dir) / "dcp").string();
    if (save) {
      train(c, net, optimizer, model, 0, kSnapshotSavedSteps, [&](int step) {
        if (step + 1 < kSnapshotSavedSteps - (dcp ? 0 : 1)) return;
        state.step_in_epoch = step + 1;
        if (dcp) {
          snapshot::save_distributed_checkpoint(checkpoint, state);
        } else {
          snapshots.save(state);
        }
      });
      if (group_->rank() == 0) lists_files(c, dcp ? checkpoint : dir, dcp);
      return;
    }
    bool resumed = false;
    if (dcp) {
      snapshot::load_distributed_checkpoint(checkpoint, state);
      resumed = true;
    } else {
      resumed = snapshots.resume(state);
    }
    checks_.check(
        check_name(c.name, zero_snapshot_check::kResumed),
        resumed && state.step_in_epoch == kSnapshotSavedSteps,
        "resumed " + std::to_string(resumed) + ", step " + std::to_string(state.step_in_epoch));
    holds_new_shard(c, optimizer);
    train(c, net, optimizer, model, kSnapshotSavedSteps, kSnapshotSteps, [](int) {});

    torch::manual_seed(31);
    ZeroNet reference;
    auto whole = c.factory(reference->parameters());
    for (int step = 0; step < kSnapshotSteps; ++step) {
      auto [x, y] = batch_of(step);
      whole->zero_grad();
      torch::mse_loss(reference->forward(x), y).backward();
      whole->step();
    }
    checks_.close_all(check_name(c.name, zero_snapshot_check::kParameters), net->parameters(),
                      reference->parameters(), 1e-5);
    if (c.stage == 1 && !dcp) plain_optimizer_refused(dir, net);
  }

  int failed() const { return checks_.failed(); }

 private:
  void lists_files(const Case& c, const std::string& dir, bool dcp) {
    std::vector<std::string> names;
    for (const auto& entry : fs::directory_iterator(dir)) {
      names.push_back(entry.path().filename().string());
    }
    std::sort(names.begin(), names.end());
    const std::vector<std::string> expected =
        dcp ? std::vector<std::string>{".metadata", "__0_0.distcp", "__0_1.distcp", "__1_0.distcp"}
            : std::vector<std::string>{"snapshot-000000000002.ddpsnap",
                                       "snapshot-000000000002.shard-0-of-2.ddpsnap",
                                       "snapshot-000000000002.shard-1-of-2.ddpsnap"};
    std::string listed;
    for (const auto& name : names) listed += name + " ";
    checks_.check(check_name(c.name, zero_snapshot_check::kFilesWritten), names == expected,
                  "found " + listed);
  }

  // Closed form: chunk r of the one bucket (zero_net_share).
  void holds_new_shard(const Case& c, const ZeroRedundancyOptimizer& optimizer) {
    const auto share = zero_net_share(group_->rank(), group_->size(), zero_net_buckets(false));
    checks_.check(check_name(c.name, zero_snapshot_check::kNewShard),
                  optimizer.state_bytes() == share.trained * c.state_per_element,
                  std::to_string(optimizer.state_bytes()) + " bytes; expected " +
                      std::to_string(share.trained * c.state_per_element));
  }

  void plain_optimizer_refused(const std::string& dir, ZeroNet& net) {
    optim::Adam plain(net->parameters(), optim::AdamOptions(1e-2));
    snapshot::TrainingState state;
    state.model = net.ptr().get();
    state.optimizer = &plain;
    std::string message;
    try {
      snapshot::SnapshotManager(snapshot::SnapshotOptions(dir), group_).resume(state);
    } catch (const SnapshotError& e) {
      message = e.what();
    }
    checks_.check(zero_snapshot_check::kPlainOptimizerRefused,
                  message.find("sharded state; resume it through TrainingState::zero_optimizer") !=
                      std::string::npos,
                  "message: '" + message + "'");
  }

  std::shared_ptr<ProcessGroup> group_;
  std::string directory_;
  NamedChecks checks_;
};

}  // namespace

int check_zero_snapshot(const std::shared_ptr<ProcessGroup>& group, const std::string& phase,
                        const std::string& directory) {
  ZeroSnapshotChecker checker(group, directory);
  const bool dcp = phase.size() > 4 && phase.substr(phase.size() - 4) == "-dcp";
  for (const Case& c : cases()) checker.run(c, phase.rfind("save", 0) == 0, dcp);
  return checker.failed();
}

}  // namespace ddp::testing

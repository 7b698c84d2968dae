#include "multiprocess/fsdp_lost_rank_checks.hpp"

#include <torch/torch.h>

#include <chrono>
#include <csignal>
#include <filesystem>
#include <string>
#include <vector>

#include "common/named_checks.hpp"
#include "ddp/comm/process_group.hpp"
#include "ddp/formats/torch_file.hpp"
#include "ddp/parallel/fully_sharded_data_parallel.hpp"
#include "ddp/parallel/fully_sharded_state.hpp"
#include "ddp/snapshot/errors.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"

namespace ddp::testing {
namespace {

namespace fs = std::filesystem;
namespace nn = torch::nn;
namespace optim = torch::optim;

// The job: FSDP over a unit per Linear, AdamW, snapshots under `directory`.
struct LostRankRun {
  LostRankRun(const std::shared_ptr<ProcessGroup>& group, const std::string& directory)
      : net((torch::manual_seed(3),
             nn::Sequential(nn::Linear(256, 4096), nn::Tanh(), nn::Linear(4096, 256)))),
        model(net, group),
        optimizer(model->parameters(), optim::AdamWOptions(1e-3)),
        sharded(model, optimizer),
        snapshots(snapshot::SnapshotOptions(directory).keep_last(3), group) {
    state.model = model->module().get();
    state.fully_sharded = &sharded;
  }
  void step(int index) {
    torch::manual_seed(100 + index);
    optimizer.zero_grad();
    model->forward(torch::randn({4, 256})).square().mean().backward();
    optimizer.step();
  }
  nn::Sequential net;
  FullyShardedDataParallel model;
  optim::AdamW optimizer;
  FullyShardedState sharded;
  snapshot::SnapshotManager snapshots;
  snapshot::TrainingState state;
};

int lost_rank_save(const std::shared_ptr<ProcessGroup>& group, const std::string& directory) {
  NamedChecks checks;
  LostRankRun run(group, directory);
  run.step(0);
  run.step(1);
  run.state.step_in_epoch = 2;
  const std::string previous = run.snapshots.save(run.state);
  const auto full = run.model->full_parameters();  // a collective: rank 1 is alive here
  if (group->rank() == 0) {
    auto values = formats::PyValue::list();
    for (const auto& item : full) values->items.push_back(formats::PyValue::of(item.value()));
    formats::write_torch_file((fs::path(directory) / "previous.pt").string(), *values);
  }
  run.step(2);
  run.step(3);
  run.state.step_in_epoch = 4;
  const std::string lost = run.snapshots.save_async(run.state);
  if (group->rank() == 1) std::raise(SIGKILL);  // its shard is being written

  const auto started = std::chrono::steady_clock::now();
  std::string message;
  try {
    run.snapshots.wait();
  } catch (const std::exception& e) {
    message = e.what();
  }
  const auto waited = std::chrono::duration_cast<std::chrono::milliseconds>(
                          std::chrono::steady_clock::now() - started)
                          .count();
  const auto limit = group->collective_timeout().count() + 20000;
  checks.check(
      fsdp_lost_rank_check::kNamedInTime,
      message.find("rank 1 did not report its shard") != std::string::npos && waited <= limit,
      "after " + std::to_string(waited) + " ms (limit " + std::to_string(limit) + "): '" + message +
          "'");
  bool intact = !fs::exists(lost) && fs::exists(previous);
  std::string detail = "new main file " + lost + (fs::exists(lost) ? " exists" : " absent");
  try {
    for (const std::string& path :
         {previous, previous.substr(0, previous.size() - 8) + ".shard-0-of-2.ddpsnap",
          previous.substr(0, previous.size() - 8) + ".shard-1-of-2.ddpsnap"}) {
      snapshot::read_snapshot_file(path);  // verifies every checksum
    }
  } catch (const SnapshotError& e) {
    intact = false;
    detail += std::string("; ") + e.what();
  }
  checks.check(fsdp_lost_rank_check::kNoNewMainFile, intact, detail);
  // The group is broken: leave without another collective (the manager's
  // destructor waits for nothing; its failure was reported above).
  std::cout.flush();
  std::_Exit(checks.failed() == 0 ? 0 : 1);
}

int lost_rank_resume(const std::shared_ptr<ProcessGroup>& group, const std::string& directory) {
  NamedChecks checks;
  LostRankRun run(group, directory);
  const bool resumed = run.snapshots.resume(run.state);
  // Held: a range-for over the temporary's items would read freed memory.
  const formats::PyRef previous =
      formats::read_torch_file((fs::path(directory) / "previous.pt").string());
  std::vector<at::Tensor> saved;
  for (const auto& item : previous->items) saved.push_back(item->tensor);
  const auto now = run.model->full_parameters();
  bool equal = resumed && run.state.step_in_epoch == 2 && saved.size() == now.size();
  for (size_t i = 0; equal && i < saved.size(); ++i) equal = torch::equal(saved[i], now[i].value());
  double worst = 0;
  for (size_t i = 0; i < std::min(saved.size(), now.size()); ++i) {
    worst = std::max(worst, (saved[i] - now[i].value()).abs().max().item<double>());
  }
  checks.check(fsdp_lost_rank_check::kResumesThePrevious, equal,
               "resumed " + std::to_string(resumed) + " at step " +
                   std::to_string(run.state.step_in_epoch) + ", largest difference " +
                   std::to_string(worst) + " over " + std::to_string(saved.size()) + " tensors");
  return checks.failed();
}

}  // namespace

int check_fsdp_lost_rank(const std::shared_ptr<ProcessGroup>& group, const std::string& phase,
                         const std::string& directory) {
  return phase == "save" ? lost_rank_save(group, directory) : lost_rank_resume(group, directory);
}

}  // namespace ddp::testing

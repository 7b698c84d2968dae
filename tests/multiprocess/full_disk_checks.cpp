#include "multiprocess/full_disk_checks.hpp"

#include <torch/torch.h>

#include <chrono>
#include <filesystem>
#include <functional>
#include <set>
#include <string>
#include <vector>

#include "ddp/comm/process_group.hpp"
#include "ddp/formats/torch_file.hpp"
#include "ddp/optim/adamw.hpp"
#include "ddp/parallel/fully_sharded_data_parallel.hpp"
#include "ddp/parallel/fully_sharded_state.hpp"
#include "ddp/snapshot/consolidated_export.hpp"
#include "ddp/snapshot/distributed_checkpoint.hpp"
#include "ddp/snapshot/errors.hpp"
#include "ddp/snapshot/pytorch_checkpoint.hpp"
#include "ddp/snapshot/snapshot_manager.hpp"

namespace ddp::testing {
namespace {

namespace fs = std::filesystem;
namespace nn = torch::nn;
using namespace full_disk_check;  // NOLINT(google-build-using-namespace)

// Job's parameters, in their order.
const char* const kParameters[] = {"0.weight", "0.bias", "2.weight", "2.bias"};

// FSDP (a unit per Linear) with AdamW: every rank's shard file and the
// consolidated file are well above 16 KiB.
struct Job {
  Job(uint64_t seed, const std::shared_ptr<ProcessGroup>& group)
      : net((torch::manual_seed(seed),
             nn::Sequential(nn::Linear(64, 256), nn::ReLU(), nn::Linear(256, 64)))),
        model(net, FullyShardedDataParallelOptions(), group),
        optimizer(model->parameters(), torch::optim::AdamWOptions(1e-2)),
        sharded(model, optimizer) {
    state.model = model->module().get();
    state.fully_sharded = &sharded;
  }
  void step(int index) {
    torch::manual_seed(500 + index);
    const auto x = torch::randn({6, 64}), y = torch::randn({6, 64});
    optimizer.zero_grad();
    torch::mse_loss(model->forward(x), y).backward();
    optimizer.step();
  }
  std::vector<at::Tensor> values() {
    std::vector<at::Tensor> values;
    for (const auto& item : model->full_parameters()) values.push_back(item.value().clone());
    return values;
  }
  nn::Sequential net;
  FullyShardedDataParallel model;
  optim::AdamW optimizer;
  FullyShardedState sharded;
  snapshot::TrainingState state;
};

bool equal(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  bool same = a.size() == b.size();
  for (size_t i = 0; same && i < a.size(); ++i) same = torch::equal(a[i], b[i]);
  return same;
}

// The regular files under `root`, relative to it, but the disk's own
// switches (the filler, the armed flag).
std::set<std::string> files_under(const std::string& root) {
  std::set<std::string> files;
  std::error_code ignored;
  for (const auto& entry : fs::recursive_directory_iterator(root, ignored)) {
    if (!entry.is_regular_file()) continue;
    const std::string name = entry.path().filename().string();
    if (name == kFiller || name == kArmed) continue;
    files.insert(fs::relative(entry.path(), root).string());
  }
  return files;
}

std::string listed(const std::set<std::string>& files) {
  std::string text;
  for (const auto& f : files) text += (text.empty() ? "" : ", ") + f;
  return "{" + text + "}";
}

class FullDiskChecker {
 public:
  FullDiskChecker(std::shared_ptr<ProcessGroup> group, std::string phase, std::string directory)
      : group_(std::move(group)),
        phase_(std::move(phase)),
        directory_(std::move(directory)),
        cause_(cause_of(phase_)) {}

  int failed() const { return checks_.failed(); }

  void snapshot(bool async) {
    const std::string writer = async ? "snapshot-async" : "snapshot";
    const std::string where = (fs::path(directory_) / writer).string();
    Job job(3, group_);
    snapshot::SnapshotManager snapshots(snapshot::SnapshotOptions(where), group_);
    auto save = [&] {
      if (!async) return snapshots.save(job.state);
      const std::string path = snapshots.save_async(job.state);
      snapshots.wait();
      return path;
    };
    job.step(0);
    save();
    const auto saved = job.values();
    job.step(1);
    run_writer(writer, save, [&] {
      Job fresh(77, group_);
      snapshot::SnapshotManager reader(snapshot::SnapshotOptions(where), group_);
      return reader.resume(fresh.state) && equal(fresh.values(), saved);
    });
    job.step(2);
  }

  void dcp() {
    saved_twice(
        "dcp", 4, "dcp-1", "dcp-2",
        [](Job& job, const std::string& path) {
          snapshot::save_distributed_checkpoint(path, job.state);
        },
        [&](const std::string& first, const std::vector<at::Tensor>& saved) {
          Job fresh(77, group_);
          snapshot::load_distributed_checkpoint(first, fresh.state);
          return equal(fresh.values(), saved);
        });
  }

  void consolidated() {
    saved_twice(
        "consolidated", 5, "consolidated-1.ddpsnap", "consolidated-2.ddpsnap",
        [](Job& job, const std::string& path) { snapshot::save_consolidated(job.model, path); },
        [](const std::string& first, const std::vector<at::Tensor>& saved) {
          return equal(parameters_in(snapshot::read_snapshot_file(first)), saved);
        });
  }

  // Rank 0 alone (export_checkpoint is not a collective).
  void exported() {
    const std::string source = (fs::path(directory_) / "consolidated-1.ddpsnap").string();
    const std::string first = (fs::path(directory_) / "exported-1.pt").string();
    const std::string second = (fs::path(directory_) / "exported-2.pt").string();
    if (group_->rank() != 0) return;
    const snapshot::SnapshotFile file = snapshot::read_snapshot_file(source);
    snapshot::export_checkpoint(file, first);
    const auto saved = parameters_in(file);
    run_writer(
        "export", [&] { snapshot::export_checkpoint(file, second); },
        [&] {
          const formats::PyRef model = formats::read_torch_file(first)->get("model");
          std::vector<at::Tensor> values;
          for (const char* name : kParameters) values.push_back(model->get(name)->tensor);
          return equal(values, saved);
        },
        /*collective=*/false);
  }

 private:
  static std::vector<at::Tensor> parameters_in(const snapshot::SnapshotFile& file) {
    std::vector<at::Tensor> values;
    for (const char* name : kParameters) {
      values.push_back(file.tensors.at(std::string("model/param/") + name));
    }
    return values;
  }

  // A Job seeded with `seed` saves with `save_to` into `first_name`, then,
  // a step later, on the broken disk into `second_name` (run_writer);
  // `loads` reads the first back against the values it saved.
  void saved_twice(
      const std::string& writer, uint64_t seed, const std::string& first_name,
      const std::string& second_name, const std::function<void(Job&, const std::string&)>& save_to,
      const std::function<bool(const std::string&, const std::vector<at::Tensor>&)>& loads) {
    const std::string first = (fs::path(directory_) / first_name).string();
    const std::string second = (fs::path(directory_) / second_name).string();
    Job job(seed, group_);
    job.step(0);
    save_to(job, first);
    const auto saved = job.values();
    job.step(1);
    run_writer(
        writer, [&] { save_to(job, second); }, [&] { return loads(first, saved); });
    job.step(2);
  }

  void barrier(bool collective) {
    if (collective) group_->barrier();
  }

  // The disk broken, or healed, by rank 0 between barriers.
  void on_disk(bool collective, const std::function<void()>& change) {
    barrier(collective);
    if (group_->rank() == 0) change();
    barrier(collective);
  }

  // The writer's second save on a broken disk, then `previous_loads`, then
  // a save on the healed disk.
  void run_writer(const std::string& writer, const std::function<void()>& save,
                  const std::function<bool()>& previous_loads, bool collective = true) {
    barrier(collective);
    const std::set<std::string> before = files_under(directory_);
    on_disk(collective, [&] { break_disk(directory_, phase_); });
    std::string error = "no error", kind = "none";
    const auto start = std::chrono::steady_clock::now();
    try {
      save();
    } catch (const snapshot::SnapshotError& e) {
      error = e.what();
      kind = "SnapshotError";
    } catch (const std::exception& e) {
      error = e.what();
      kind = "another exception";
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    checks_.check(of(writer, kNamedError),
                  kind == "SnapshotError" && error.find(directory_) != std::string::npos &&
                      error.find(cause_) != std::string::npos && seconds < 30,
                  kind + " after " + std::to_string(seconds) + " s: '" + error +
                      "' (wanted a SnapshotError naming " + directory_ + " and '" + cause_ + "')");
    barrier(collective);  // every rank's cleanup done
    const std::set<std::string> after = files_under(directory_);
    checks_.check(of(writer, kNothingLeft), after == before,
                  "before " + listed(before) + ", after " + listed(after));
    bool loads = false;
    std::string load_error;
    try {
      loads = previous_loads();
    } catch (const std::exception& e) {
      load_error = e.what();
    }
    checks_.check(of(writer, kPreviousLoads), loads,
                  load_error.empty() ? "other values" : load_error);
    on_disk(collective, [&] { heal_disk(directory_); });
    std::string again;
    try {
      save();
    } catch (const std::exception& e) {
      again = e.what();
    }
    checks_.check(of(writer, kSavesAgain), again.empty() && files_under(directory_) != before,
                  again.empty() ? "nothing new written" : again);
  }

  std::shared_ptr<ProcessGroup> group_;
  std::string phase_;
  std::string directory_;
  std::string cause_;
  NamedChecks checks_;
};

}  // namespace

int check_full_disk(const std::shared_ptr<ProcessGroup>& group, const std::string& phase,
                    const std::string& directory) {
  FullDiskChecker checker(group, phase, directory);
  checker.snapshot(/*async=*/false);
  checker.snapshot(/*async=*/true);
  checker.dcp();
  if (phase != "eio-rank-1") {  // rank 0 alone writes these
    checker.consolidated();
    checker.exported();
  }
  return checker.failed();
}

}  // namespace ddp::testing

// FullyShardedDataParallel's state in PyTorch's Distributed Checkpoint
// format (fsdp_dcp_checks.cpp): saved at 2 ranks and loaded at 1, 2 and 3;
// checkpoints PyTorch 2.6's dcp.save wrote loaded at 1, 2 and 3 (the files
// in data/dcp-pytorch-2.6, and, where python3-torch has
// torch.distributed.checkpoint, fresh ones); and ddp's loaded by PyTorch at
// 1 and 3 ranks into a plain model that trains on to where ddp trains
// (dcp_peer.py).

#include <gtest/gtest.h>

#include <chrono>

#include "common/expect_checks.hpp"
#include "common/required_suites.hpp"
#include "common/temporary_directory.hpp"
#include "common/torch_python.hpp"
#include "ddp/formats/torch_file.hpp"
#include "ddp/launch/child_process.hpp"
#include "multiprocess/frozen_optimizer_checks.hpp"
#include "multiprocess/fsdp_dcp_checks.hpp"
#include "multiprocess/harness.hpp"

namespace ddp::testing {
namespace {

using namespace std::chrono_literals;

void run_fsdp_dcp(int world, const std::string& phase, const std::string& directory,
                  const EnvironmentFor& environment_for = torchrun_environment) {
  auto results = run_ranks(world,
                           {"fsdp-dcp", "--phase", phase, "--directory", directory, "--backend",
                            "gloo", "--collective-timeout-ms", "60000"},
                           environment_for);
  for (const auto& r : results) EXPECT_FALSE(r.killed_at_deadline) << describe(results);
  expect_checks_per_rank(results,
                         [&](int rank) { return fsdp_dcp_check_names(phase, rank, world); });
}

TEST(FsdpDistributedCheckpoint, SavedAtTwoRanksLoadsAtOneTwoAndThree) {
  const TemporaryDirectory directory("ddp-fsdp-dcp-");
  run_fsdp_dcp(2, "save", directory.string());
  for (int world : {2, 1, 3}) run_fsdp_dcp(world, "resume", directory.string());
}

// Saved by a model sharded within each of 2 nodes of 2 ranks and replicated
// across them: the first row writes each element once (Note [Replicated
// shards] in ddp/parallel/sharded_state.hpp).
TEST(FsdpDistributedCheckpoint, HybridSavedOnTwoNodesOfTwoLoadsAtOneAndThree) {
  const TemporaryDirectory directory("ddp-fsdp-dcp-hybrid-");
  run_fsdp_dcp(4, "save-hybrid", directory.string(), on_nodes(2));
  for (int world : {1, 3}) run_fsdp_dcp(world, "resume", directory.string());
}

TEST(FsdpDistributedCheckpoint, PyTorchsCheckpointsLoadAtOneTwoAndThree) {
  for (int world : {1, 2, 3}) run_fsdp_dcp(world, "load-pytorch", DDP_DCP_FIXTURES);
}

// python3-torch with torch.distributed.checkpoint (PyTorch 2.x: Debian 13's,
// the LibTorch 2.6 leg), or a skip (a failure where CI requires the suite).
bool has_dcp() {
  if (torch_python_dir().empty()) return false;
  launch::ChildSpec probe{{torch_python(), "-c", "import torch.distributed.checkpoint"}, {}, {}};
  return launch::run_children({probe}, 60s).at(0).exit_code == 0;
}

#define SKIP_WITHOUT_DCP()                                                                \
  if (!has_dcp())                                                                         \
  DDP_SKIP_UNLESS_REQUIRED(                                                               \
      "no python3 with torch.distributed.checkpoint (PyTorch 2.x); the LibTorch 2.6 leg " \
      "(scripts/libtorch2.sh) runs this test with Debian 13's python3-torch")

launch::ChildResult run_peer(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {torch_python(), DDP_DCP_PEER};
  argv.insert(argv.end(), args.begin(), args.end());
  return launch::run_children({launch::ChildSpec{argv, {}, {}}}, 300s).at(0);
}

// The largest elementwise difference between two lists of tensors (of the
// same length, checked by the caller).
double worst_difference(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, (a[i] - b[i]).abs().max().item<double>());
  }
  return worst;
}

std::vector<at::Tensor> read_list(const std::string& path) {
  std::vector<at::Tensor> tensors;
  const formats::PyRef root = formats::read_torch_file(path);  // held while its items are read
  for (const auto& item : root->items) tensors.push_back(item->tensor);
  return tensors;
}

// FSDP's and ZeRO-2's checkpoints, saved at 2 ranks.
TEST(SnapshotDcpInterop, PyTorchLoadsDdpsCheckpointAtOneAndThreeRanksAndTrainsOnAlike) {
  SKIP_WITHOUT_DCP();
  const TemporaryDirectory directory("ddp-dcp-interop-");
  const std::string dir = directory.string();
  run_fsdp_dcp(2, "save", dir);
  run_fsdp_dcp(1, "resume", dir);     // ddp's own 4 more steps: ddp-final-1.pt
  run_fsdp_dcp(2, "save-zero", dir);  // ZeRO-2's checkpoint and ddp-zero-final.pt
  for (const std::string sharding : {"fsdp", "zero"}) {
    const bool zero = sharding == "zero";
    const auto ddp_final = read_list(dir + (zero ? "/ddp-zero-final.pt" : "/ddp-final-1.pt"));
    for (int world : {1, 3}) {
      const launch::ChildResult r = run_peer({"load", dir, std::to_string(world), sharding});
      ASSERT_EQ(r.exit_code, 0) << r.output;
      EXPECT_NE(r.output.find("epoch 1 step 4"), std::string::npos) << r.output;
      const auto python_final = read_list(dir + (zero ? "/python-zero-final-" : "/python-final-") +
                                          std::to_string(world) + ".pt");
      ASSERT_EQ(python_final.size(), ddp_final.size());
      const double worst = worst_difference(python_final, ddp_final);
      std::cout << "PyTorch at " << world << " rank(s) from ddp's " << sharding
                << " checkpoint: largest difference from ddp " << worst << std::endl;
      EXPECT_LT(worst, 1e-5);
    }
  }
}

// A hybrid model's checkpoint (2 nodes of 2 ranks), loaded by PyTorch at 2
// ranks, trains on as ddp does from it at 1.
TEST(SnapshotDcpInterop, PyTorchLoadsAHybridModelsCheckpoint) {
  SKIP_WITHOUT_DCP();
  const TemporaryDirectory directory("ddp-dcp-hybrid-interop-");
  const std::string dir = directory.string();
  run_fsdp_dcp(4, "save-hybrid", dir, on_nodes(2));
  run_fsdp_dcp(1, "resume", dir);  // ddp-final-1.pt
  const launch::ChildResult r = run_peer({"load", dir, "2", "fsdp"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_NE(r.output.find("epoch 1 step 4"), std::string::npos) << r.output;
  const auto ddp_final = read_list(dir + "/ddp-final-1.pt");
  const auto python_final = read_list(dir + "/python-final-2.pt");
  ASSERT_EQ(python_final.size(), ddp_final.size());
  const double worst = worst_difference(python_final, ddp_final);
  std::cout << "PyTorch at 2 ranks from ddp's hybrid checkpoint: largest difference from ddp "
            << worst << std::endl;
  EXPECT_LT(worst, 1e-5);
}

// dcp_to_torch_save of ddp's checkpoint equals ddp's consolidated export of
// the same state (with the optimizer, issue 55 point 5), and that export
// continues in PyTorch with AdamW to where ddp ends.
TEST(SnapshotDcpInterop, DcpToTorchSaveEqualsTheConsolidatedExportWhichContinuesInPyTorch) {
  SKIP_WITHOUT_DCP();
  const TemporaryDirectory directory("ddp-dcp-export-");
  const std::string dir = directory.string();
  run_fsdp_dcp(2, "save", dir);
  run_fsdp_dcp(2, "resume", dir);  // ddp-final-2.pt
  const launch::ChildResult compared = run_peer({"compare-export", dir});
  ASSERT_EQ(compared.exit_code, 0) << compared.output;
  EXPECT_NE(compared.output.find("equal: 25 tensors"), std::string::npos) << compared.output;
  const launch::ChildResult continued = run_peer({"continue-export", dir});
  ASSERT_EQ(continued.exit_code, 0) << continued.output;
  const auto ddp_final = read_list(dir + "/ddp-final-2.pt");
  const auto python_final = read_list(dir + "/python-export-final.pt");
  ASSERT_EQ(python_final.size(), ddp_final.size());
  const double worst = worst_difference(python_final, ddp_final);
  std::cout << "PyTorch from the consolidated export against ddp: largest difference " << worst
            << std::endl;
  EXPECT_LT(worst, 1e-5);
}

TEST(SnapshotDcpInterop, FreshPyTorchCheckpointsLoadAtOneTwoAndThree) {
  SKIP_WITHOUT_DCP();
  const TemporaryDirectory directory("ddp-dcp-pytorch-");
  const launch::ChildResult r = run_peer({"save", directory.string()});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int world : {1, 2, 3}) run_fsdp_dcp(world, "load-pytorch", directory.string());
}

// Issue 71 point 2: the first Linear frozen and the optimizer over the
// trainable parameters only (frozen_optimizer_checks.hpp), under FSDP,
// ZeRO-2 and DDP, saved at 2 ranks and resumed at 1, 2 and 3.
void run_frozen(int world, const std::string& phase, const std::string& directory) {
  auto results = run_ranks(world, {"frozen-optimizer", "--phase", phase, "--directory", directory,
                                   "--backend", "gloo", "--collective-timeout-ms", "60000"});
  for (const auto& r : results) EXPECT_FALSE(r.killed_at_deadline) << describe(results);
  expect_checks_per_rank(results,
                         [&](int rank) { return frozen_optimizer_check_names(phase, rank); });
}

// The parameters PyTorch ended with (`python_path`) against ddp's
// `expected`, to 1e-5; prints the largest difference, naming `what`.
void expect_python_matches(const std::string& python_path, const std::vector<at::Tensor>& expected,
                           const std::string& what) {
  const auto python_final = read_list(python_path);
  ASSERT_EQ(python_final.size(), expected.size());
  const double worst = worst_difference(python_final, expected);
  std::cout << what << ": largest difference from one process " << worst << std::endl;
  EXPECT_LT(worst, 1e-5);
}

TEST(SnapshotTrainableOnly, SavedAtTwoRanksResumesEveryWayAtOneTwoAndThree) {
  const TemporaryDirectory directory("ddp-trainable-only-");
  run_frozen(2, "save", directory.string());
  for (int world : {1, 2, 3}) run_frozen(world, "resume", directory.string());
}

// PyTorch loads ddp's checkpoints (FSDP's, ZeRO's) at 1 and 3 ranks into a
// plain model with the same layer frozen and AdamW over the rest, FSDP's
// into FSDP1 too, and the consolidated export in one process, and trains
// on to one process's 8 steps as ddp does.
TEST(SnapshotTrainableOnly, PyTorchLoadsDdpsCheckpointsAndExportAndTrainsOnAlike) {
  SKIP_WITHOUT_DCP();
  const TemporaryDirectory directory("ddp-trainable-only-interop-");
  const std::string dir = directory.string();
  run_frozen(2, "save", dir);
  for (const std::string sharding : {"fsdp", "zero"}) {
    const bool zero = sharding == "zero";
    const auto ddp_final = read_list(dir + (zero ? "/ddp-zero-final.pt" : "/ddp-final-1.pt"));
    for (int world : {1, 3}) {
      const launch::ChildResult r =
          run_peer({"load", dir, std::to_string(world), sharding, "frozen"});
      ASSERT_EQ(r.exit_code, 0) << r.output;
      EXPECT_NE(r.output.find("epoch 1 step 4"), std::string::npos) << r.output;
      expect_python_matches(
          dir + (zero ? "/python-zero-final-" : "/python-final-") + std::to_string(world) + ".pt",
          ddp_final,
          "PyTorch at " + std::to_string(world) + " rank(s) from ddp's trainable-only " + sharding +
              " checkpoint");
    }
  }
  // Into PyTorch's FSDP1 (the frozen Linear a unit of its own) as well.
  const auto ddp_final = read_list(dir + "/ddp-final-1.pt");
  for (int world : {1, 3}) {
    const launch::ChildResult r =
        run_peer({"load", dir, std::to_string(world), "fsdp", "into-fsdp1", "frozen"});
    ASSERT_EQ(r.exit_code, 0) << r.output;
    EXPECT_NE(r.output.find("epoch 1 step 4"), std::string::npos) << r.output;
    expect_python_matches(dir + "/python-fsdp1-final-" + std::to_string(world) + ".pt", ddp_final,
                          "PyTorch FSDP1 at " + std::to_string(world) +
                              " rank(s) from ddp's trainable-only checkpoint");
  }
  const launch::ChildResult continued = run_peer({"continue-export", dir, "frozen"});
  ASSERT_EQ(continued.exit_code, 0) << continued.output;
  expect_python_matches(dir + "/python-export-final.pt", ddp_final,
                        "PyTorch from the trainable-only consolidated export");
}

TEST(SnapshotTrainableOnly, PyTorchsCheckpointsLoadAtOneTwoAndThree) {
  SKIP_WITHOUT_DCP();
  const TemporaryDirectory directory("ddp-trainable-only-pytorch-");
  const launch::ChildResult r = run_peer({"save", directory.string(), "frozen"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  for (int world : {1, 2, 3}) run_frozen(world, "load-pytorch", directory.string());
}

}  // namespace
}  // namespace ddp::testing

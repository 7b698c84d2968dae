// The GPU tests (suite names start with "Gpu"). They are compiled in every
// build and skip with a message where no CUDA device is visible; on a GPU
// machine scripts/gpu-check.sh builds ddp against its LibTorch and runs them.
// The multi-process ones start gpu_test_worker ranks that share the one GPU
// (NCCL allows one rank per GPU, so two ranks run over Gloo, whose c10d
// backend moves CUDA tensors through the host).

#include <gtest/gtest.h>
#include <torch/cuda.h>
#include <torch/torch.h>
#include <torch/version.h>

#include <set>
#include <string>
#include <vector>

#include "comm/backends/backends.hpp"
#include "common/expect_checks.hpp"
#include "common/models.hpp"
#include "common/named_checks.hpp"
#include "ddp/parallel/data_parallel.hpp"
#include "gpu/gpu_checks.hpp"
#include "multiprocess/fsdp_checks.hpp"
#include "multiprocess/harness.hpp"

namespace ddp::testing {
namespace {

#define DDP_REQUIRE_GPU()                                                         \
  if (!torch::cuda::is_available())                                               \
  GTEST_SKIP() << (at::hasCUDA() ? "no CUDA device visible to this process"       \
                                 : "LibTorch " TORCH_VERSION " here is CPU-only") \
               << "; the GPU tests run on a GPU machine: bash scripts/gpu-check.sh"

#define DDP_REQUIRE_NCCL()                                                         \
  if (!backends::nccl_compiled_in())                                               \
  GTEST_SKIP() << "this build of ddp has no NCCL backend (LibTorch " TORCH_VERSION \
                  " without CUDA/NCCL); build against a CUDA LibTorch"

constexpr auto kDeadline = std::chrono::seconds(300);

std::vector<launch::ChildResult> run_gpu_ranks(int world, const std::string& scenario,
                                               const std::string& backend) {
  return run_ranks(world, {scenario, backend}, torchrun_environment, kDeadline);
}

std::set<std::string> collective_checks(const std::string& backend) {
  std::set<std::string> names{"backend is " + backend,           "barrier",
                              "asynchronous all_reduce float32", "cpu tensor all_reduce sum",
                              "cpu tensor stays on the cpu",     "cpu tensor broadcast",
                              "cpu tensor all_gather",           "cpu tensor reduce_scatter sum"};
  for (auto dtype : gpu_collective_dtypes()) {
    const std::string label = dtype_label(dtype);
    for (const auto& op : gpu_reduce_ops()) names.insert("all_reduce " + op.second + " " + label);
    names.insert("broadcast " + label);
    names.insert("all_gather " + label);
    names.insert("reduce_scatter sum " + label);
  }
  return names;
}

void add_training(std::set<std::string>& names, const std::string& name, int steps) {
  for (int step = 0; step < steps; ++step) {
    names.insert(name + " step " + std::to_string(step) + " parameters");
  }
  names.insert(name + " replicas identical");
}

std::set<std::string> ddp_checks() {
  std::set<std::string> names{"no_sync accumulated gradients"};
  for (const char* model : {"mlp", "lenet", "mlp bucket view"}) add_training(names, model, 4);
  return names;
}

std::set<std::string> amp_checks() {
  std::set<std::string> names;
  for (const char* dtype : {"float16", "bfloat16"}) {
    const std::string d = dtype;
    names.insert("O1 " + d + " autocast runs matmul in 16 bits");
    for (const char* level : {"O1", "O2"}) {
      const std::string prefix = std::string(level) + " " + d;
      for (const char* check :
           {" output float32", " close to float32 training", " replicas identical"}) {
        names.insert(prefix + check);
      }
    }
    names.insert("O2 " + d + " model parameters 16-bit");
    names.insert("O2 " + d + " float32 masters");
    for (const char* check :
         {" inf on the last rank skips the step", " parameters unchanged after the skipped step",
          " scale halved", " clean step runs", " replicas identical"}) {
      names.insert("scaler " + d + check);
    }
  }
  return names;
}

std::set<std::string> sync_batch_norm_checks() {
  std::set<std::string> names{"convnet sync batch norm running statistics"};
  for (const char* layer : {"batch norm 1d", "batch norm 2d"}) {
    for (const char* check :
         {" output on the GPU", " output", " input gradient", " weight gradient summed over ranks",
          " bias gradient summed over ranks", " running mean", " running var"}) {
      names.insert(std::string(layer) + check);
    }
  }
  add_training(names, "convnet sync batch norm", 3);
  return names;
}

TEST(GpuNccl, CollectivesAtWorldSizeOne) {
  DDP_REQUIRE_GPU();
  DDP_REQUIRE_NCCL();
  expect_checks(run_gpu_ranks(1, "collectives", "nccl"), collective_checks("nccl"));
}

TEST(GpuGloo, CollectivesOnCudaTensorsWithTwoProcesses) {
  DDP_REQUIRE_GPU();
  expect_checks(run_gpu_ranks(2, "collectives", "gloo"), collective_checks("gloo"));
}

TEST(GpuDdp, TwoProcessesOverGlooEqualOneProcess) {
  DDP_REQUIRE_GPU();
  expect_checks(run_gpu_ranks(2, "ddp", "gloo"), ddp_checks());
}

TEST(GpuDdp, NcclAtWorldSizeOneEqualsOneProcess) {
  DDP_REQUIRE_GPU();
  DDP_REQUIRE_NCCL();
  expect_checks(run_gpu_ranks(1, "ddp", "nccl"), ddp_checks());
}

// Note [Two ways to wait for the GPU] in host_sync_checks.cpp.
TEST(GpuDdp, StepsNeverMakeTheHostWaitForTheGpu) {
  DDP_REQUIRE_GPU();
  DDP_REQUIRE_NCCL();
  const std::vector<std::string> names = host_never_waits_checks();
  expect_checks(run_gpu_ranks(1, "host-never-waits", "nccl"),
                std::set<std::string>(names.begin(), names.end()));
}

TEST(GpuCapturedStep, ReplaysEqualEagerStepsOnNccl) {
  DDP_REQUIRE_GPU();
  DDP_REQUIRE_NCCL();
  const std::vector<std::string> names = captured_step_checks();
  expect_checks(run_gpu_ranks(1, "captured-step", "nccl"),
                std::set<std::string>(names.begin(), names.end()));
}

TEST(GpuAmp, OptLevelsAndScalerOnTwoProcesses) {
  DDP_REQUIRE_GPU();
  expect_checks(run_gpu_ranks(2, "amp", "gloo"), amp_checks());
}

TEST(GpuSyncBatchNorm, TwoProcessesEqualBatchNormOnTheWholeBatch) {
  DDP_REQUIRE_GPU();
  expect_checks(run_gpu_ranks(2, "sync-batch-norm", "gloo"), sync_batch_norm_checks());
}

// FullyShardedDataParallel's checks (tests/multiprocess/fsdp_checks.cpp) on
// CUDA tensors: NCCL at world size 1 (one rank per GPU), Gloo with two
// ranks sharing the GPU.
TEST(GpuFsdp, NcclAtWorldSizeOneMatchesOneProcess) {
  DDP_REQUIRE_GPU();
  DDP_REQUIRE_NCCL();
  expect_checks(run_gpu_ranks(1, "fsdp", "nccl"), fsdp_check_names());
}

TEST(GpuFsdp, TwoProcessesOverGlooOnCudaTensorsMatchOneProcess) {
  DDP_REQUIRE_GPU();
  expect_checks(run_gpu_ranks(2, "fsdp", "gloo"), fsdp_check_names());
}

// Two replicas on one GPU (each on its own thread) train exactly as one
// module on the whole batch, with forward() and with balanced
// forward_backward().
TEST(GpuDataParallel, TwoReplicasOnOneGpuEqualOneModule) {
  DDP_REQUIRE_GPU();
  at::globalContext().setAllowTF32CuDNN(false);
  at::globalContext().setAllowTF32CuBLAS(false);
  const c10::Device gpu(c10::kCUDA, 0);
  for (bool balanced : {false, true}) {
    SCOPED_TRACE(balanced ? "balanced forward_backward" : "forward");
    torch::manual_seed(7);
    examples::LeNet5 primary;
    torch::manual_seed(7);
    examples::LeNet5 reference;
    primary->to(gpu);
    reference->to(gpu);
    DataParallel model(primary,
                       DataParallelOptions().devices({gpu, gpu}).balanced_memory(balanced));
    auto sgd = torch::optim::SGDOptions(0.05).momentum(0.9);
    torch::optim::SGD optimizer(model->parameters(), sgd);
    torch::optim::SGD reference_optimizer(reference->parameters(), sgd);
    auto mse = [](const torch::Tensor& out, const torch::Tensor& target) {
      return torch::mse_loss(out, target);
    };
    for (int step = 0; step < 4; ++step) {
      torch::manual_seed(70 + step);
      const auto x = torch::randn({10, 1, 28, 28}, torch::device(gpu));
      const auto y = torch::randn({10, 10}, torch::device(gpu));
      optimizer.zero_grad();
      torch::Tensor loss;
      if (balanced) {
        loss = model->forward_backward(x, y, mse);
      } else {
        const auto output = model->forward(x);
        EXPECT_TRUE(output.is_cuda()) << output.device();
        loss = mse(output, y);
        loss.backward();
      }
      EXPECT_EQ(model->replicas_used(), 2u);
      reference_optimizer.zero_grad();
      const auto expected_loss = mse(reference->forward(x), y);
      expected_loss.backward();
      EXPECT_LE(NamedChecks::relative_error(loss.detach(), expected_loss.detach()), 1e-5)
          << "step " << step << " loss " << loss.item<double>() << " expected "
          << expected_loss.item<double>();
      std::vector<torch::Tensor> grads, expected_grads;
      for (const auto& p : primary->parameters()) grads.push_back(p.grad().reshape({-1}));
      for (const auto& p : reference->parameters())
        expected_grads.push_back(p.grad().reshape({-1}));
      EXPECT_LE(NamedChecks::relative_error(torch::cat(grads), torch::cat(expected_grads)), 1e-5)
          << "step " << step << " gradients";
      optimizer.step();
      reference_optimizer.step();
    }
    std::vector<torch::Tensor> params, expected_params;
    for (const auto& p : primary->parameters()) params.push_back(p.detach().reshape({-1}));
    for (const auto& p : reference->parameters())
      expected_params.push_back(p.detach().reshape({-1}));
    EXPECT_LE(NamedChecks::relative_error(torch::cat(params), torch::cat(expected_params)), 1e-5)
        << "parameters after 4 steps";
  }
}

}  // namespace
}  // namespace ddp::testing

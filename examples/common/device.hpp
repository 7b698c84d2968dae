#pragma once

// The examples' --device flag: which device a process trains on. As with
// torchrun, each process of a node takes the GPU of its local rank.

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <torch/torch.h>

#include <string>

#include "ddp/base/errors.hpp"
#include "ddp/comm/environment.hpp"

namespace ddp::examples {

/// The device `choice` (--device) names for the process of local rank
/// `local_rank`: "cpu" the CPU; "cuda" the GPU cuda:local_rank; "auto" that
/// GPU where CUDA is available, else the CPU. A GPU also becomes the
/// current CUDA device (PyTorch's torch.cuda.set_device), so that whatever
/// uses "the current GPU" (NCCL staging a CPU tensor) uses this process's.
/// \throws ConfigError for "cuda" without CUDA, and for a GPU the node lacks
///   (more processes than GPUs on the node).
inline torch::Device resolve_device(const std::string& choice, int local_rank) {
  if (choice != "auto" && choice != "cpu" && choice != "cuda") {
    throw ConfigError("--device " + choice + " is not a device; use auto, cpu or cuda.");
  }
  const bool cuda = torch::cuda::is_available();
  if (choice == "cpu" || (choice == "auto" && !cuda)) return torch::Device(torch::kCPU);
  if (!cuda) {
    throw ConfigError(
        "--device cuda: CUDA is not available to this process (a CPU-only LibTorch, or no GPU "
        "visible); use --device cpu, or --device auto to train on the GPU where there is one.");
  }
  const auto gpus = static_cast<int>(torch::cuda::device_count());
  if (local_rank < 0 || local_rank >= gpus) {
    throw ConfigError("--device " + choice + ": this process is local rank " +
                      std::to_string(local_rank) +
                      " and takes GPU cuda:" + std::to_string(local_rank) + ", but only " +
                      std::to_string(gpus) + " GPU(s) are visible; start at most " +
                      std::to_string(gpus) + " process(es) per node, or use --device cpu.");
  }
  const torch::Device device(torch::kCUDA, static_cast<c10::DeviceIndex>(local_rank));
  c10::impl::getDeviceGuardImpl(device.type())->setDevice(device);
  return device;
}

/// As resolve_device(choice, local_rank) for the local rank the launcher's
/// variables give (as ddp::init() resolves them): for examples that pick
/// their backend by the device, before their group starts.
inline torch::Device resolve_device(const std::string& choice) {
  return resolve_device(choice, resolve_topology(capture_environment()).local_rank);
}

}  // namespace ddp::examples

#pragma once

// What every example's main() does around its training function: the BLAS
// in use named once per job, errors become a message, an error file for
// ddprun, and the exit code of their kind; and a digest of the trained
// weights that tests compare.

#include <torch/torch.h>

#include <cstdio>
#include <exception>
#include <iostream>
#include <string>
#include <vector>

#include "ddp/base/blas.hpp"
#include "ddp/base/errors.hpp"
#include "ddp/comm/environment.hpp"
#include "ddp/comm/error_file.hpp"

namespace ddp::examples {

/// Runs `train` (returning an exit status); an exception is reported on
/// stderr and in the launcher's error file, and mapped to ddp's exit code.
/// Rank 0 (of whichever launcher) first names the BLAS LibTorch runs
/// on, unless its launcher did (ddp::base::report_blas_once).
template <typename Train>
int run_example(Train&& train) {
  try {
    // torchrun's, Open MPI's or Slurm's rank; a topology that does not
    // resolve is init()'s to report, with its own message.
    if (ddp::resolve_topology(ddp::capture_environment()).rank == 0)
      ddp::base::report_blas_once("");
  } catch (const ddp::Error&) {
  }
  try {
    return train();
  } catch (const std::exception& e) {
    ddp::record_error(e);
    std::cerr << "error: " << e.what() << std::endl;
    return static_cast<int>(ddp::exit_code_for(e));
  }
}

/// FNV-1a over the bytes of tensors added one at a time, so that a model
/// gathered unit by unit is digested without holding it whole.
class WeightsDigest {
 public:
  void add(const torch::Tensor& tensor) {
    torch::Tensor bytes = tensor.contiguous().cpu();
    const auto* p = static_cast<const unsigned char*>(bytes.data_ptr());
    for (int64_t i = 0; i < bytes.numel() * bytes.element_size(); ++i)
      hash_ = (hash_ ^ p[i]) * 1099511628211ull;
  }
  std::string hex() const {
    char text[17];
    std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(hash_));
    return text;
  }

 private:
  uint64_t hash_ = 1469598103934665603ull;
};

/// FNV-1a over the bytes of `tensors`, in order.
inline std::string weights_digest(const std::vector<torch::Tensor>& tensors) {
  WeightsDigest digest;
  for (const auto& tensor : tensors) digest.add(tensor);
  return digest.hex();
}

/// FNV-1a over the bytes of a module's parameters and buffers: equal
/// digests mean bit-identical weights (tests compare resumed runs with it).
inline std::string weights_digest(const torch::nn::Module& module) {
  std::vector<torch::Tensor> tensors = module.parameters();
  for (const auto& t : module.buffers()) tensors.push_back(t);
  return weights_digest(tensors);
}

}  // namespace ddp::examples

// gpu_test_worker: one rank of a GPU test, started N times by the harness
// (tests/multiprocess/harness.hpp).
//
//   gpu_test_worker collectives|ddp|amp|sync-batch-norm|host-never-waits|captured-step|fsdp BACKEND
//
// Prints one "check <name>: ok|FAILED: ..." line per check and exits 0 when
// none failed; on a ddp::Error prints "error: <message>" and exits with its
// code.

#include <torch/cuda.h>

#include <chrono>
#include <iostream>
#include <string>

#include "ddp/base/errors.hpp"
#include "ddp/comm/init.hpp"
#include "ddp/comm/process_group.hpp"
#include "gpu/gpu_checks.hpp"
#include "multiprocess/fsdp_checks.hpp"

int main(int argc, char** argv) {
  const std::string scenario = argc > 2 ? argv[1] : "";
  if (scenario != "collectives" && scenario != "ddp" && scenario != "amp" &&
      scenario != "sync-batch-norm" && scenario != "host-never-waits" &&
      scenario != "captured-step" && scenario != "fsdp") {
    std::cerr << "usage: gpu_test_worker "
                 "collectives|ddp|amp|sync-batch-norm|host-never-waits|captured-step|fsdp "
                 "BACKEND\n";
    return 2;
  }
  if (!torch::cuda::is_available()) {
    std::cerr << "error: no CUDA device is visible to this process\n";
    return 3;
  }
  try {
    auto group =
        ddp::init(ddp::InitOptions().backend(argv[2]).collective_timeout(std::chrono::seconds(60)));
    ddp::testing::NamedChecks checks;
    int failed = 0;  // by checks that keep their own NamedChecks
    if (scenario == "fsdp") {
      ddp::testing::exact_float32();
      failed = ddp::testing::check_fully_sharded(group, c10::Device(c10::kCUDA, 0));
    } else if (scenario == "collectives") {
      checks.check("backend is " + std::string(argv[2]), group->backend_name() == argv[2],
                   "backend " + group->backend_name());
      ddp::testing::check_cuda_collectives(*group, checks);
    } else if (scenario == "ddp") {
      ddp::testing::check_cuda_ddp(group, checks);
    } else if (scenario == "amp") {
      ddp::testing::check_cuda_amp(group, checks);
    } else if (scenario == "captured-step") {
      ddp::testing::check_captured_step(group, checks);
    } else if (scenario == "host-never-waits") {
      ddp::testing::check_host_never_waits(group, checks);
    } else {
      ddp::testing::check_cuda_sync_batch_norm(group, checks);
    }
    group->barrier();
    failed += checks.failed();
    std::cout << "rank " << group->rank() << ": " << failed << " check(s) failed" << std::endl;
    return failed == 0 ? 0 : 1;
  } catch (const ddp::Error& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return static_cast<int>(ddp::exit_code_for(e));
  } catch (const std::exception& e) {
    std::cerr << "unexpected error: " << e.what() << std::endl;
    return 1;
  }
}

// sync_batch_norm_test_worker: one rank of a SyncBatchNorm test, started N
// times by the harness (tests/multiprocess/harness.hpp).
//
//   sync_batch_norm_test_worker check [BACKEND]   (default gloo)
//
// Prints "rank R: P checks passed, F failed" and exits 0 when F is 0; on a
// ddp::Error prints "error: <message>" and exits with its code.

#include <chrono>
#include <iostream>
#include <string>

#include "ddp/errors.hpp"
#include "ddp/init.hpp"
#include "sync_batch_norm/sync_batch_norm_checks.hpp"

int main(int argc, char** argv) {
  try {
    const std::string scenario = argc > 1 ? argv[1] : "";
    if (scenario != "check") {
      std::cerr << "usage: sync_batch_norm_test_worker check [BACKEND]\n";
      return 2;
    }
    const std::string backend = argc > 2 ? argv[2] : "gloo";
    auto group = ddp::init(ddp::InitOptions().backend(backend).collective_timeout(
        std::chrono::seconds(30)));
    auto report = ddp::testing::checkSyncBatchNorm(group);
    for (const auto& failure : report.failures) std::cout << failure << "\n";
    std::cout << "rank " << group->rank() << ": " << report.passed << " checks passed, "
              << report.failures.size() << " failed" << std::endl;
    return report.failures.empty() ? 0 : 1;
  } catch (const ddp::Error& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return static_cast<int>(ddp::exitCodeFor(e));
  } catch (const std::exception& e) {
    std::cerr << "unexpected error: " << e.what() << std::endl;
    return 1;
  }
}

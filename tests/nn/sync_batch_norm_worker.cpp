// sync_batch_norm_test_worker: one rank of a SyncBatchNorm test, started N
// times by the harness (tests/multiprocess/harness.hpp).
//
//   sync_batch_norm_test_worker check [BACKEND]   (default gloo)
//
// Prints each check by name (tests/common/named_checks.hpp) and exits 0 when
// none failed; on a ddp::Error prints "error: <message>" and exits with its
// code.

#include <chrono>
#include <iostream>
#include <string>

#include "ddp/errors.hpp"
#include "ddp/init.hpp"
#include "nn/sync_batch_norm_checks.hpp"

int main(int argc, char** argv) {
  try {
    const std::string scenario = argc > 1 ? argv[1] : "";
    if (scenario != "check") {
      std::cerr << "usage: sync_batch_norm_test_worker check [BACKEND]\n";
      return 2;
    }
    const std::string backend = argc > 2 ? argv[2] : "gloo";
    auto group =
        ddp::init(ddp::InitOptions().backend(backend).collective_timeout(std::chrono::seconds(30)));
    const int failed = ddp::testing::checkSyncBatchNorm(group);
    if (failed > 0) std::cout << "rank " << group->rank() << ": " << failed << " check(s) failed\n";
    return failed > 0 ? 1 : 0;
  } catch (const ddp::Error& e) {
    std::cerr << "error: " << e.what() << std::endl;
    return static_cast<int>(ddp::exit_code_for(e));
  } catch (const std::exception& e) {
    std::cerr << "unexpected error: " << e.what() << std::endl;
    return 1;
  }
}

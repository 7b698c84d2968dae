// sync_batch_norm_test_worker: one rank of a SyncBatchNorm test, started N
// times by the harness (tests/multiprocess/harness.hpp).
//
//   sync_batch_norm_test_worker check [BACKEND]   (default gloo)
//
// Prints each check by name (tests/common/named_checks.hpp); exit codes and
// errors as tests/common/worker_main.hpp says.

#include <chrono>
#include <string>
#include <vector>

#include "common/worker_main.hpp"
#include "ddp/comm/init.hpp"
#include "ddp/comm/process_group.hpp"
#include "nn/sync_batch_norm_checks.hpp"

int main(int argc, char** argv) {
  using namespace ddp::testing;  // NOLINT(google-build-using-namespace)
  return run_worker(argc, argv,
                    {{"check", [](const std::vector<std::string>& args) {
                        auto group = ddp::init(ddp::InitOptions()
                                                   .backend(args.empty() ? "gloo" : args[0])
                                                   .collective_timeout(std::chrono::seconds(30)));
                        return checks_exit_code(group->rank(), check_sync_batch_norm(group));
                      }}});
}

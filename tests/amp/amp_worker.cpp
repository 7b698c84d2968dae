// amp_test_worker: one rank of a mixed-precision test, started N times by
// the harness (tests/multiprocess/harness.hpp).
//
//   amp_test_worker scaler-overflow | amp-ddp
//
// Prints each check by name (tests/common/named_checks.hpp); exit codes and
// errors as tests/common/worker_main.hpp says.

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "amp/amp_checks.hpp"
#include "common/worker_main.hpp"
#include "ddp/comm/init.hpp"
#include "ddp/comm/process_group.hpp"

namespace {

using Checks = std::function<int(const std::shared_ptr<ddp::ProcessGroup>&)>;

// A scenario running `checks` on a Gloo group.
ddp::testing::WorkerScenario on_gloo(Checks checks) {
  return [checks](const std::vector<std::string>&) {
    auto group =
        ddp::init(ddp::InitOptions().backend("gloo").collective_timeout(std::chrono::seconds(30)));
    return ddp::testing::checks_exit_code(group->rank(), checks(group));
  };
}

}  // namespace

int main(int argc, char** argv) {
  return ddp::testing::run_worker(
      argc, argv,
      {{"scaler-overflow", on_gloo(ddp::testing::check_scaler_overflow)},
       {"amp-ddp", on_gloo(ddp::testing::check_amp_with_ddp)}});
}

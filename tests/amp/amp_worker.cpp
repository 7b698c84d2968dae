// amp_test_worker: one rank of a mixed-precision test, started N times by
// the harness (tests/multiprocess/harness.hpp).
//
//   amp_test_worker scaler-overflow | amp-ddp
//
// Prints "rank R: P checks passed, F failed" and exits 0 when F is 0; on a
// ddp::Error prints "error: <message>" and exits with its code.

#include <chrono>
#include <iostream>
#include <string>

#include "amp/amp_checks.hpp"
#include "ddp/errors.hpp"
#include "ddp/init.hpp"

int main(int argc, char** argv) {
  try {
    const std::string scenario = argc > 1 ? argv[1] : "";
    if (scenario != "scaler-overflow" && scenario != "amp-ddp") {
      std::cerr << "usage: amp_test_worker scaler-overflow|amp-ddp\n";
      return 2;
    }
    auto group = ddp::init(ddp::InitOptions().backend("gloo").collective_timeout(
        std::chrono::seconds(30)));
    auto report = scenario == "scaler-overflow" ? ddp::testing::checkScalerOverflow(group)
                                                : ddp::testing::checkAmpWithDdp(group);
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

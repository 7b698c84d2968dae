// amp_test_worker: one rank of a mixed-precision test, started N times by
// the harness (tests/multiprocess/harness.hpp).
//
//   amp_test_worker scaler-overflow | amp-ddp
//
// Prints each check by name (tests/common/named_checks.hpp) and exits 0 when
// none failed; on a ddp::Error prints "error: <message>" and exits with its
// code.

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
    auto group =
        ddp::init(ddp::InitOptions().backend("gloo").collective_timeout(std::chrono::seconds(30)));
    const int failed = scenario == "scaler-overflow" ? ddp::testing::checkScalerOverflow(group)
                                                     : ddp::testing::checkAmpWithDdp(group);
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

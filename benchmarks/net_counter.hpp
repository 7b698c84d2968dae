#pragma once

// The sent-byte counter of a network interface, for the benchmarks that
// run on the simulated cluster (benchmarks/cluster/cluster.sh): what a
// node sent over its link (header-only).

#include <cstdint>
#include <fstream>
#include <stdexcept>
#include <string>

namespace ddp_bench {

/// The interface's sent-byte counter (the kernel's, for every process of
/// the node), or 0 when no interface is named.
/// \throws std::runtime_error when the counter cannot be read.
inline int64_t tx_bytes(const std::string& interface) {
  if (interface.empty()) return 0;
  std::ifstream in("/sys/class/net/" + interface + "/statistics/tx_bytes");
  int64_t bytes = 0;
  if (!(in >> bytes))
    throw std::runtime_error("cannot read the sent bytes of interface " + interface);
  return bytes;
}

}  // namespace ddp_bench

#pragma once

// Internal: an endpoint as ddprun's agents pass it among themselves,
// "HOST:PORT" (an IPv6 host unbracketed: the port follows the last colon).
// What users type goes through parse_endpoint in launch_options.cpp.

#include <string>
#include <utility>

namespace ddp::launch {

inline std::pair<std::string, int> split_endpoint(const std::string& endpoint) {
  const auto colon = endpoint.rfind(':');
  return {endpoint.substr(0, colon), std::stoi(endpoint.substr(colon + 1))};
}

}  // namespace ddp::launch

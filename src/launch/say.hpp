#pragma once

// Internal: how ddprun's agent speaks to its user: one line on stderr,
// prefixed "ddprun: " like every launcher message.

#include <chrono>
#include <iostream>
#include <string>

#include "base/str.hpp"

namespace ddp::launch {

inline void say(const std::string& message) { std::cerr << "ddprun: " << message << std::endl; }

/// A duration as messages give it: "3 s", "3.1 s".
inline std::string in_seconds(std::chrono::milliseconds duration) {
  const auto ms = duration.count();
  return base::detail::str(ms / 1000,
                           ms % 1000 >= 100 ? base::detail::str(".", ms % 1000 / 100) : "", " s");
}

}  // namespace ddp::launch

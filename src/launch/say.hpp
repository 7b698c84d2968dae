#pragma once

// Internal: how ddprun's agent speaks to its user: one line on stderr,
// prefixed "ddprun: " like every launcher message.

#include <iostream>
#include <string>

namespace ddp::launch {

inline void say(const std::string& message) { std::cerr << "ddprun: " << message << std::endl; }

}  // namespace ddp::launch

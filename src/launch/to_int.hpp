#pragma once

// Internal: a command-line number, strictly: the whole text as a decimal
// int, or nothing (std::stoi would accept "3x" and throw on "x").

#include <optional>
#include <string>

namespace ddp::launch {

/// `text` as a whole decimal int, or nothing.
inline std::optional<int> to_int(const std::string& text) {
  size_t used = 0;
  int value = 0;
  try {
    value = std::stoi(text, &used);
  } catch (...) {
    return std::nullopt;
  }
  if (used != text.size()) return std::nullopt;
  return value;
}

}  // namespace ddp::launch

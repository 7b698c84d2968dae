#pragma once

// Internal: store values that are text (addresses, counts, names); the
// store holds bytes.

#include <cstdint>
#include <string>
#include <vector>

namespace ddp::comm::store {

/// The bytes the store keeps for `text`.
inline std::vector<uint8_t> as_bytes(const std::string& text) { return {text.begin(), text.end()}; }

/// The text a store value holds.
inline std::string as_text(const std::vector<uint8_t>& value) {
  return {value.begin(), value.end()};
}

}  // namespace ddp::comm::store

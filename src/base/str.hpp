#pragma once

// Internal: the one helper that builds a message from its pieces.

#include <sstream>
#include <string>
#include <type_traits>

namespace ddp::base::detail {

/// A byte-sized number, which a stream prints as a character.
template <typename T>
inline constexpr bool kIsByteNumber =
    std::is_same_v<T, signed char> || std::is_same_v<T, unsigned char>;

/// Note [Messages are built with str()]
/// A message is built with str("rank ", rank, " of ", world, ".") rather than
/// a chain of std::to_string concatenations: every argument is written with
/// its operator<< into one stream, as c10::str does. A number prints as a
/// stream prints it: a double as 0.5 (six significant digits), not
/// std::to_string's 0.500000; a text that needs fixed decimals formats them
/// itself. A stream prints a byte-sized number (uint8_t, int8_t) as a
/// character, so str() refuses one: cast it to int. This header needs only
/// the standard library: the store's sources include it where LibTorch is
/// not on the include path (scripts/fuzz-store.sh).
template <typename... Args>
std::string str(const Args&... args) {
  static_assert((!kIsByteNumber<Args> && ...),
                "str() would print a uint8_t or int8_t as a character: cast it to int");
  std::ostringstream out;
  ((out << args), ...);
  return out.str();
}

}  // namespace ddp::base::detail

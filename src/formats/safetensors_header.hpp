#pragma once

// Internal: a safetensors file's header, read and parsed once for
// identify_file() and read_safetensors() (ddp/formats/file_format.hpp,
// ddp/formats/safetensors_file.hpp).

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <istream>
#include <string>

namespace ddp::formats::detail {

/// The safetensors crate refuses headers above 100 MB.
inline constexpr uint64_t kMaxSafetensorsHeader = 100'000'000;
/// A header's JSON nests at most this deep (it needs 3: the header, an
/// entry, its shape); deeper is refused before nlohmann::json parses it.
inline constexpr int kMaxSafetensorsNesting = 64;

/// Reads the header of the file open in `in` (of `file_size` bytes): "" when
/// its 8-byte size fits the file and the format's limit and the text parses
/// as a JSON object (then in `header` and `header_size`, where given),
/// otherwise why not, for messages.
std::string safetensors_header_problem(std::istream& in, uint64_t file_size,
                                       nlohmann::json* header = nullptr,
                                       uint64_t* header_size = nullptr);

}  // namespace ddp::formats::detail

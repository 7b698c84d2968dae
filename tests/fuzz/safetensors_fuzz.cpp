// libFuzzer target: identify_file and read_safetensors
// (ddp/formats/file_format.hpp, ddp/formats/safetensors_file.hpp).
//
// A safetensors file starts with its header's length, so most mutations of
// a whole file only break that length. An input whose first byte is even
// is therefore the header's JSON up to the first NUL byte, then the data:
// the target writes the length, so mutations reach the header's checks. An
// odd first byte: the rest is the file as it is.

#include <cstring>
#include <map>
#include <string>

#include "ddp/formats/errors.hpp"
#include "ddp/formats/file_format.hpp"
#include "ddp/formats/safetensors_file.hpp"
#include "reader_fuzz.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  std::string file(reinterpret_cast<const char*>(data + 1), size - 1);
  if ((data[0] & 1) == 0) {
    const size_t end = std::min(file.find('\0'), file.size());
    const uint64_t length = end;
    std::string prefix(8, '\0');
    std::memcpy(prefix.data(), &length, 8);  // little-endian
    file = prefix + file.substr(0, end) + (end < file.size() ? file.substr(end + 1) : "");
  }
  return ddp::fuzz::read_input<ddp::formats::FormatError>(
      ".safetensors", reinterpret_cast<const uint8_t*>(file.data()), file.size(),
      [](const auto& path) {
        (void)ddp::formats::describe(ddp::formats::identify_file(path), path);
        std::map<std::string, std::string> metadata;
        (void)ddp::formats::read_safetensors(path, &metadata);
      });
}

#include "ddp/formats/file_format.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <vector>

#include "base/str.hpp"
#include "formats/safetensors_header.hpp"
#include "formats/zip_directory.hpp"

namespace ddp::formats {
namespace {

// What torch.save's legacy format starts with after PROTO n: LONG1 of 10
// bytes, torch.serialization.MAGIC_NUMBER (0x1950a86a20f9469cfc6c).
constexpr unsigned char kLegacyMagic[] = {0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46,
                                          0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19};
constexpr unsigned char kZipLocalHeader[] = {'P', 'K', 3, 4};

struct Probe {
  std::ifstream in;
  uint64_t size = 0;
  explicit Probe(const std::string& path) : in(path, std::ios::binary) {
    if (in) {
      in.seekg(0, std::ios::end);
      size = static_cast<uint64_t>(in.tellg());
    }
  }
  std::vector<unsigned char> read(uint64_t offset, uint64_t n) {
    std::vector<unsigned char> bytes(n);
    in.clear();
    in.seekg(static_cast<std::streamoff>(offset));
    if (!in.read(reinterpret_cast<char*>(bytes.data()), static_cast<std::streamsize>(n))) return {};
    return bytes;
  }
};

bool is_zip(Probe& file) {
  const std::vector<unsigned char> head = file.read(0, 4);
  if (head.size() != 4 || std::memcmp(head.data(), kZipLocalHeader, 4) != 0) return false;
  const uint64_t start = file.size - std::min(file.size, detail::kMaxEndRecordBytes);
  return detail::find_end_record(file.read(start, file.size - start)).has_value();
}

bool is_legacy(Probe& file) {
  const std::vector<unsigned char> head = file.read(0, 2 + sizeof kLegacyMagic);
  return head.size() == 2 + sizeof kLegacyMagic && head[0] == 0x80 &&
         std::memcmp(&head[2], kLegacyMagic, sizeof kLegacyMagic) == 0;
}

}  // namespace

FileFormat identify_file(const std::string& path) {
  Probe file(path);
  if (!file.in) return FileFormat::kUnknown;
  if (is_zip(file)) return FileFormat::kTorchZip;
  if (is_legacy(file)) return FileFormat::kTorchLegacy;
  if (detail::safetensors_header_problem(file.in, file.size).empty()) {
    return FileFormat::kSafetensors;
  }
  return FileFormat::kUnknown;
}

std::string describe(FileFormat format, const std::string& path) {
  switch (format) {
    case FileFormat::kTorchZip:
      return "a zip archive of torch.save";
    case FileFormat::kSafetensors:
      return "a safetensors file";
    case FileFormat::kTorchLegacy:
      return "it is in torch.save's legacy format (_use_new_zipfile_serialization=False); load "
             "it in Python and save it again with torch.save(obj, path)";
    case FileFormat::kUnknown:
      break;
  }
  Probe file(path);
  if (!file.in) return "no such file (or it cannot be opened)";
  return "it is neither torch.save's zip archive (no zip signature and end of central "
         "directory), its legacy format (no magic number) nor a safetensors file (" +
         detail::safetensors_header_problem(file.in, file.size) + ")";
}

}  // namespace ddp::formats

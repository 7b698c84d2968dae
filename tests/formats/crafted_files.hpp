#pragma once

// Files built byte by byte for the formats' tests: a torch.save archive
// around any pickle, a safetensors file with any header, and the pickle
// opcodes they need.

#include <caffe2/serialize/inline_container.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

namespace ddp::formats::testing {

/// A zip archive as torch.save lays it out (LibTorch's own writer) with
/// `pickle` as its data.pkl and `records` as data/<key>.
inline void write_archive(const std::string& path, const std::string& pickle,
                          const std::vector<std::pair<std::string, std::string>>& records = {}) {
  caffe2::serialize::PyTorchStreamWriter zip(path);
  zip.writeRecord("data.pkl", pickle.data(), pickle.size());
  for (const auto& [key, bytes] : records) {
    zip.writeRecord("data/" + key, bytes.data(), bytes.size());
  }
  zip.writeEndOfFile();
}

/// A safetensors file: the 8-byte size of `header` (padded with spaces to
/// `header_size` when given), the header, then `data`.
inline void write_safetensors_bytes(const std::string& path, std::string header,
                                    const std::string& data, uint64_t header_size = 0) {
  if (header_size > header.size()) header.append(header_size - header.size(), ' ');
  uint64_t size = header.size();
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>((size >> (8 * i)) & 0xff));
  out << header << data;
}

/// Pickle fragments, as Python's Lib/pickle.py spells them.
namespace pickle {
inline std::string proto() { return std::string("\x80\x02", 2); }
inline std::string stop() { return "."; }
inline std::string global(const std::string& module, const std::string& name) {
  return "c" + module + "\n" + name + "\n";
}
inline std::string string(const std::string& text) {
  std::string out = "X";
  const uint32_t n = static_cast<uint32_t>(text.size());
  out.append(reinterpret_cast<const char*>(&n), 4);
  return out + text;
}
inline std::string integer(int32_t value) {
  std::string out = "J";
  out.append(reinterpret_cast<const char*>(&value), 4);
  return out;
}
/// LONG1 of 8 bytes: any int64.
inline std::string long_integer(int64_t value) {
  std::string out("\x8a\x08", 2);
  out.append(reinterpret_cast<const char*>(&value), 8);
  return out;
}
/// A tensor of `dtype_storage` (FloatStorage, ...) over storage `key` of
/// `numel` elements, with `sizes` and `strides` at `offset`.
inline std::string tensor(const std::string& storage_class, const std::string& key, int64_t numel,
                          const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
                          int64_t offset = 0) {
  std::string out = global("torch._utils", "_rebuild_tensor_v2") + "(";
  out += "(" + string("storage") + global("torch", storage_class) + string(key) + string("cpu") +
         long_integer(numel) + "tQ";  // persistent id
  out += long_integer(offset);
  out += "(";
  for (int64_t s : sizes) out += long_integer(s);
  out += "t(";
  for (int64_t s : strides) out += long_integer(s);
  out += "t\x89" + global("collections", "OrderedDict") + ")R" + "tR";
  return out;
}
}  // namespace pickle

}  // namespace ddp::formats::testing

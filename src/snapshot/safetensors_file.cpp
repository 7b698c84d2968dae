#include "snapshot/safetensors_file.hpp"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <set>

#include "base/str.hpp"
#include "ddp/snapshot/errors.hpp"
#include "snapshot/atomic_file.hpp"

namespace ddp::snapshot::detail {
namespace {

using nlohmann::json;

// The format's dtype codes.
const std::vector<std::pair<const char*, at::ScalarType>>& safetensors_dtypes() {
  static const std::vector<std::pair<const char*, at::ScalarType>> kCodes = {
      {"F32", at::kFloat}, {"F64", at::kDouble}, {"F16", at::kHalf},  {"BF16", at::kBFloat16},
      {"I64", at::kLong},  {"I32", at::kInt},    {"I16", at::kShort}, {"I8", at::kChar},
      {"U8", at::kByte},   {"BOOL", at::kBool}};
  return kCodes;
}

// The safetensors rust crate refuses headers above 100 MB.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

}  // namespace

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<at::Tensor> contiguous;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (!names.insert(name).second || name == "__metadata__") {
      throw SnapshotError("cannot write " + path + ": the tensor name '" + name +
                          "' appears twice or is reserved");
    }
    const char* code = nullptr;
    for (const auto& [candidate, dtype] : safetensors_dtypes()) {
      if (dtype == tensor.scalar_type()) code = candidate;
    }
    if (code == nullptr) {
      throw SnapshotError(base::detail::str("cannot write ", path, ": tensor ", name, " has dtype ",
                                            tensor.scalar_type(),
                                            ", which safetensors has no code for"));
    }
    contiguous.push_back(tensor.detach().to(at::kCPU).contiguous());
    const uint64_t bytes = contiguous.back().nbytes();
    header[name] = {{"dtype", code},
                    {"shape", tensor.sizes().vec()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  std::string text = header.dump();
  text.append((8 - text.size() % 8) % 8, ' ');  // the data starts 8-byte aligned
  write_atomically(path, "the safetensors file", [&](const ByteSink& sink) {
    const uint64_t size = text.size();  // little-endian on every platform ddp builds for
    sink(&size, sizeof size);
    sink(text.data(), text.size());
    for (const at::Tensor& t : contiguous) {
      if (t.nbytes() > 0) sink(t.data_ptr(), t.nbytes());
    }
  });
}

NamedTensors read_safetensors(const std::string& path,
                              std::map<std::string, std::string>* metadata) {
  auto fail = [&](const std::string& what) {
    throw SnapshotError("cannot read the safetensors file " + path + ": " + what);
  };
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail("no such file");
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  in.seekg(0);
  uint64_t header_size = 0;
  if (file_size < 8 || !in.read(reinterpret_cast<char*>(&header_size), 8)) {
    fail(base::detail::str("it has ", file_size, " bytes, fewer than the 8 of the header size"));
  }
  if (header_size > kMaxHeaderBytes || header_size > file_size - 8) {
    fail(base::detail::str("its header size ", header_size, " exceeds the file's ", file_size,
                           " bytes (or the format's 100 MB)"));
  }
  std::string text(header_size, '\0');
  in.read(text.data(), static_cast<std::streamsize>(header_size));
  json header;
  try {
    header = json::parse(text);
  } catch (const json::exception& e) {
    fail(std::string("its header is not JSON (") + e.what() + ")");
  }
  if (!header.is_object()) fail("its header is not a JSON object");
  const uint64_t data_size = file_size - 8 - header_size;
  struct Entry {
    std::string name;
    at::ScalarType dtype;
    std::vector<int64_t> shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  for (const auto& [name, spec] : header.items()) {
    if (name == "__metadata__") {
      if (metadata) *metadata = spec.get<std::map<std::string, std::string>>();
      continue;
    }
    try {
      Entry entry{name, at::kFloat, spec.at("shape").get<std::vector<int64_t>>(),
                  spec.at("data_offsets").at(0).get<uint64_t>(),
                  spec.at("data_offsets").at(1).get<uint64_t>()};
      const std::string code = spec.at("dtype").get<std::string>();
      bool known = false;
      for (const auto& [candidate, dtype] : safetensors_dtypes()) {
        if (code == candidate) entry.dtype = dtype, known = true;
      }
      if (!known) fail("tensor " + name + " has dtype " + code + ", which ddp does not read");
      entries.push_back(std::move(entry));
    } catch (const json::exception& e) {
      fail("the entry of " + name + " is malformed (" + e.what() + ")");
    }
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  uint64_t expected = 0;
  NamedTensors result;
  for (const Entry& entry : entries) {
    at::Tensor tensor = at::empty(entry.shape, at::TensorOptions(entry.dtype));
    if (entry.begin != expected || entry.end < entry.begin || entry.end > data_size ||
        entry.end - entry.begin != tensor.nbytes()) {
      fail(base::detail::str("tensor ", entry.name, " spans bytes [", entry.begin, ", ", entry.end,
                             ") of ", data_size, "; its shape needs ", tensor.nbytes(),
                             " bytes starting at ", expected));
    }
    in.seekg(static_cast<std::streamoff>(8 + header_size + entry.begin));
    if (!in.read(static_cast<char*>(tensor.data_ptr()),
                 static_cast<std::streamsize>(tensor.nbytes()))) {
      fail("its data ends early at tensor " + entry.name);
    }
    expected = entry.end;
    result.emplace_back(entry.name, std::move(tensor));
  }
  if (expected != data_size) {
    fail(base::detail::str("its tensors cover ", expected, " of its ", data_size, " data bytes"));
  }
  return result;
}

}  // namespace ddp::snapshot::detail

#include "ddp/formats/safetensors_file.hpp"

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <set>

#include "base/str.hpp"
#include "ddp/formats/errors.hpp"
#include "formats/atomic_file.hpp"
#include "formats/safetensors_header.hpp"

namespace ddp::formats {
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

// How deep `text`'s brackets nest outside its strings.
int nesting(const std::string& text) {
  int depth = 0, deepest = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;
      else if (c == '"')
        in_string = false;
    } else if (c == '"') {
      in_string = true;
    } else if (c == '{' || c == '[') {
      deepest = std::max(deepest, ++depth);
    } else if (c == '}' || c == ']') {
      --depth;
    }
  }
  return deepest;
}

// A JSON number that is an integer in [0, 2^63).
bool is_count(const json& value) {
  return value.is_number_unsigned() || (value.is_number_integer() && value.get<int64_t>() >= 0);
}

}  // namespace

namespace detail {

std::string safetensors_header_problem(std::istream& in, uint64_t file_size, json* header,
                                       uint64_t* header_size) {
  unsigned char size_bytes[8];
  in.clear();
  in.seekg(0);
  if (file_size < 8 || !in.read(reinterpret_cast<char*>(size_bytes), 8)) {
    return base::detail::str("it has ", file_size, " bytes, fewer than the 8 of a header size");
  }
  uint64_t size = 0;
  for (int i = 7; i >= 0; --i) size = (size << 8) | size_bytes[i];  // little-endian
  if (size > kMaxSafetensorsHeader || size > file_size - 8) {
    return base::detail::str("its first 8 bytes give a header size of ", size,
                             ", beyond the file's ", file_size, " bytes or the format's 100 MB");
  }
  std::string text(size, '\0');
  if (!in.read(text.data(), static_cast<std::streamsize>(size))) return "its header cannot be read";
  if (nesting(text) > kMaxSafetensorsNesting) {
    return base::detail::str("its header nests deeper than ", kMaxSafetensorsNesting, " levels");
  }
  json parsed = json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (parsed.is_discarded()) return base::detail::str("its header of ", size, " bytes is not JSON");
  if (!parsed.is_object()) return "its header is JSON but not an object";
  if (header) *header = std::move(parsed);
  if (header_size) *header_size = size;
  return "";
}

}  // namespace detail

void write_safetensors(const std::string& path, const NamedTensors& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json header = json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::vector<at::Tensor> contiguous;
  std::set<std::string> names;
  uint64_t offset = 0;
  for (const auto& [name, tensor] : tensors) {
    if (!names.insert(name).second || name == "__metadata__") {
      throw FormatError("cannot write " + path + ": the tensor name '" + name +
                        "' appears twice or is reserved");
    }
    const char* code = nullptr;
    for (const auto& [candidate, dtype] : safetensors_dtypes()) {
      if (dtype == tensor.scalar_type()) code = candidate;
    }
    if (code == nullptr) {
      throw FormatError(base::detail::str("cannot write ", path, ": tensor ", name, " has dtype ",
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
  detail::write_atomically(path, "the safetensors file", [&](const detail::ByteSink& sink) {
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
    throw FormatError("cannot read the safetensors file " + path + ": " + what);
  };
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  if (!in) fail("no such file");
  const uint64_t file_size = static_cast<uint64_t>(in.tellg());
  json header;
  uint64_t header_size = 0;
  const std::string problem =
      detail::safetensors_header_problem(in, file_size, &header, &header_size);
  if (!problem.empty()) fail(problem);
  const uint64_t data_size = file_size - 8 - header_size;
  struct Entry {
    std::string name;
    at::ScalarType dtype;
    std::vector<int64_t> shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  // Every entry checked, and the byte counts compared, before any tensor
  // is allocated.
  for (const auto& [name, spec] : header.items()) {
    if (name == "__metadata__") {
      if (!spec.is_object())
        fail("its __metadata__ is a JSON " + std::string(spec.type_name()) +
             ", not a map of strings");
      for (const auto& [key, value] : spec.items()) {
        if (!value.is_string()) {
          fail("its __metadata__ entry '" + key + "' is a JSON " + value.type_name() +
               ", not a string");
        }
        if (metadata) (*metadata)[key] = value.get<std::string>();
      }
      continue;
    }
    const auto* shape = spec.is_object() && spec.contains("shape") ? &spec.at("shape") : nullptr;
    const auto* offsets =
        spec.is_object() && spec.contains("data_offsets") ? &spec.at("data_offsets") : nullptr;
    const auto* code = spec.is_object() && spec.contains("dtype") ? &spec.at("dtype") : nullptr;
    if (!shape || !shape->is_array() || !offsets || !offsets->is_array() || offsets->size() != 2 ||
        !is_count((*offsets)[0]) || !is_count((*offsets)[1]) || !code || !code->is_string()) {
      fail("the entry of " + name +
           " is not {\"dtype\": string, \"shape\": [...], \"data_offsets\": [begin, end]}");
    }
    Entry entry{name, at::kFloat, {}, (*offsets)[0].get<uint64_t>(), (*offsets)[1].get<uint64_t>()};
    for (const auto& extent : *shape) {
      if (!is_count(extent))
        fail("tensor " + name + " has shape " + shape->dump() +
             ", which is not a list of sizes of 0 or more");
      entry.shape.push_back(extent.get<int64_t>());
    }
    bool known = false;
    for (const auto& [candidate, dtype] : safetensors_dtypes()) {
      if (code->get<std::string>() == candidate) entry.dtype = dtype, known = true;
    }
    if (!known) {
      fail("tensor " + name + " has dtype " + code->get<std::string>() +
           ", which ddp does not read");
    }
    entries.push_back(std::move(entry));
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  uint64_t expected = 0;
  for (const Entry& entry : entries) {
    int64_t bytes = static_cast<int64_t>(c10::elementSize(entry.dtype));
    bool overflow = false;
    for (int64_t extent : entry.shape)
      overflow = overflow || __builtin_mul_overflow(bytes, extent, &bytes);
    if (overflow || entry.begin != expected || entry.end < entry.begin || entry.end > data_size ||
        entry.end - entry.begin != static_cast<uint64_t>(bytes)) {
      fail(base::detail::str("tensor ", entry.name, " spans bytes [", entry.begin, ", ", entry.end,
                             ") of ", data_size, "; its shape ", c10::IntArrayRef(entry.shape),
                             " needs ",
                             overflow ? std::string("more than 2^63") : std::to_string(bytes),
                             " bytes starting at ", expected));
    }
    expected = entry.end;
  }
  if (expected != data_size) {
    fail(base::detail::str("its tensors cover ", expected, " of its ", data_size, " data bytes"));
  }
  NamedTensors result;
  for (const Entry& entry : entries) {
    at::Tensor tensor = at::empty(entry.shape, at::TensorOptions(entry.dtype));
    in.clear();
    in.seekg(static_cast<std::streamoff>(8 + header_size + entry.begin));
    if (!in.read(static_cast<char*>(tensor.data_ptr()),
                 static_cast<std::streamsize>(tensor.nbytes()))) {
      fail("its data ends early at tensor " + entry.name);
    }
    result.emplace_back(entry.name, std::move(tensor));
  }
  return result;
}

}  // namespace ddp::formats

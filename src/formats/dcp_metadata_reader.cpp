// read_dcp_metadata (ddp/formats/dcp.hpp): `.metadata`'s pickle read as a
// value tree by the bounded unpickler (src/formats/pickle_reader.hpp), its
// dataclasses taken apart as data (Note [The DCP subset ddp speaks]).

#include <c10/util/ArrayRef.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <utility>

#include "base/str.hpp"
#include "ddp/formats/dcp.hpp"
#include "ddp/formats/errors.hpp"
#include "formats/pickle_protocol.hpp"
#include "formats/pickle_reader.hpp"

namespace ddp::formats {
namespace {

using Kind = PyValue::Kind;
// "module.Class", as the reader names a class.
std::string metadata_class(const char* name) {
  return std::string(detail::kDcpMetadataModule) + "." + name;
}

class MetadataParser {
 public:
  explicit MetadataParser(std::string path) : path_(std::move(path)) {}

  [[noreturn]] void fail(const std::string& what) const {
    throw FormatError("cannot read the distributed checkpoint's metadata " + path_ + ": " + what);
  }

  // The state of a dataclass instance `cls` (NEWOBJ of no arguments, then
  // BUILD of a dict): the dict.
  const PyValue& state(const PyValue& value, const std::string& cls, const std::string& where) {
    if (value.kind != Kind::kObject || value.text != cls || value.items.size() != 1 ||
        value.items[0]->kind != Kind::kDict) {
      fail(where + " is a " + value.type_name() + ", not a " + cls + " with its fields");
    }
    return *value.items[0];
  }
  const PyValue& field(const PyValue& fields, const std::string& name, const std::string& where) {
    PyRef found = fields.get(name);
    if (!found) fail(where + " has no field " + name);
    return *found;
  }
  int64_t integer(const PyValue& value, const std::string& where) {
    if (value.kind != Kind::kInt) fail(where + " is a " + value.type_name() + ", not an int");
    return value.integer;
  }
  std::string text(const PyValue& value, const std::string& where) {
    if (value.kind != Kind::kString) fail(where + " is a " + value.type_name() + ", not a str");
    return value.text;
  }
  // torch.Size((d0, d1, ...)): REDUCE of the class on a tuple of ints.
  std::vector<int64_t> size(const PyValue& value, const std::string& where) {
    if (value.kind != Kind::kObject || value.text != "torch.Size" || value.items.size() != 1 ||
        value.items[0]->kind != Kind::kTuple) {
      fail(where + " is a " + value.type_name() + ", not a torch.Size");
    }
    std::vector<int64_t> dims;
    for (const auto& item : value.items[0]->items) dims.push_back(integer(*item, where));
    return dims;
  }
  at::ScalarType dtype(const PyValue& properties, const std::string& where) {
    // TensorProperties pickles its state as a tuple (dtype, layout,
    // requires_grad, memory format, pin_memory).
    const std::string cls = metadata_class("TensorProperties");
    if (properties.kind != Kind::kObject || properties.text != cls ||
        properties.items.size() != 1 || properties.items[0]->kind != Kind::kTuple ||
        properties.items[0]->items.empty()) {
      fail(where + "'s properties are a " + properties.type_name() + ", not a " + cls);
    }
    const PyValue& dtype = *properties.items[0]->items[0];
    if (dtype.kind == Kind::kGlobal) {
      for (const auto& [name, scalar] : detail::dtype_names()) {
        if (dtype.text == std::string("torch.") + name) return scalar;
      }
    }
    fail(where + " has the dtype " + dtype.type_name() +
         ", which torch.save has no storage class for");
  }
  std::vector<PyRef> path(const PyValue& value, const std::string& where) {
    if (value.kind != Kind::kTuple && value.kind != Kind::kList) {
      fail(where + "'s path in planner_data is a " + value.type_name() + ", not a tuple");
    }
    for (const auto& item : value.items) {
      if (item->kind != Kind::kString && item->kind != Kind::kInt) {
        fail(where + "'s path in planner_data holds a " + item->type_name());
      }
    }
    return value.items;
  }
  DcpLocation location(const PyValue& info, const std::string& where) {
    const PyValue& fields =
        state(info, std::string(detail::kDcpFilesystemModule) + "._StorageInfo", where);
    DcpLocation at;
    at.file = text(field(fields, "relative_path", where), where + "'s relative_path");
    const int64_t offset = integer(field(fields, "offset", where), where + "'s offset");
    const int64_t length = integer(field(fields, "length", where), where + "'s length");
    if (at.file.empty() || at.file.find('/') != std::string::npos || at.file == "." ||
        at.file == "..") {
      fail(where + " lies in \"" + at.file +
           "\", which is not a file in the checkpoint's directory");
    }
    if (offset < 0 || length < 0) {
      fail(base::detail::str(where, " lies at offset ", offset, " with length ", length));
    }
    at.offset = static_cast<uint64_t>(offset);
    at.length = static_cast<uint64_t>(length);
    return at;
  }

  DcpMetadata parse(const PyValue& root);

 private:
  std::string path_;
};

DcpMetadata MetadataParser::parse(const PyValue& root) {
  const PyValue& fields = state(root, metadata_class("Metadata"), "the root");
  const PyValue& described = field(fields, "state_dict_metadata", "Metadata");
  const PyValue& storage = field(fields, "storage_data", "Metadata");
  if (described.kind != Kind::kDict) fail("state_dict_metadata is not a dict");
  if (storage.kind != Kind::kDict) {
    fail("storage_data is a " + storage.type_name() +
         ", not FileSystemWriter's dict of item locations (another storage writer saved it)");
  }
  // Each item's location, by key and chunk offsets (None for an object).
  std::map<std::pair<std::string, std::optional<std::vector<int64_t>>>, DcpLocation> where;
  for (const auto& [index, info] : storage.entries) {
    const PyValue& key = state(*index, metadata_class("MetadataIndex"), "a key of storage_data");
    const std::string fqn = text(field(key, "fqn", "MetadataIndex"), "MetadataIndex's fqn");
    // MetadataIndex keeps `offset` only when it is not None.
    const PyRef offset = key.get("offset");
    std::optional<std::vector<int64_t>> offsets;
    if (offset && offset->kind != Kind::kNone) offsets = size(*offset, "the offset of " + fqn);
    where[{fqn, offsets}] = location(*info, "item " + fqn);
  }
  DcpMetadata metadata;
  for (const auto& [key_value, entry] : described.entries) {
    const std::string key = text(*key_value, "a key of state_dict_metadata");
    if (entry->kind == Kind::kObject && entry->text == metadata_class("BytesStorageMetadata")) {
      const auto found = where.find({key, std::nullopt});
      if (found == where.end()) fail("the value " + key + " has no item in storage_data");
      metadata.objects[key] = found->second;
      continue;
    }
    const PyValue& tensor_fields =
        state(*entry, metadata_class("TensorStorageMetadata"), "entry " + key);
    DcpTensor tensor;
    tensor.dtype = dtype(field(tensor_fields, "properties", key), "tensor " + key);
    tensor.size = size(field(tensor_fields, "size", key), "the size of " + key);
    for (int64_t d : tensor.size) {
      if (d < 0)
        fail(base::detail::str("tensor ", key, " has the size ", c10::IntArrayRef(tensor.size)));
    }
    const PyValue& chunks = field(tensor_fields, "chunks", key);
    if (chunks.kind != Kind::kList) fail("the chunks of " + key + " are not a list");
    for (const auto& chunk_value : chunks.items) {
      const PyValue& chunk =
          state(*chunk_value, metadata_class("ChunkStorageMetadata"), "a chunk of " + key);
      DcpChunk c;
      c.box.offsets = size(field(chunk, "offsets", key), "a chunk's offsets of " + key);
      c.box.sizes = size(field(chunk, "sizes", key), "a chunk's sizes of " + key);
      if (!c.box.inside(tensor.size)) {
        fail(base::detail::str("a chunk of ", key, " at ", c10::IntArrayRef(c.box.offsets),
                               " of size ", c10::IntArrayRef(c.box.sizes),
                               " lies outside its size ", c10::IntArrayRef(tensor.size)));
      }
      const auto found = where.find({key, c.box.offsets});
      if (found == where.end()) {
        fail(base::detail::str("the chunk of ", key, " at ", c10::IntArrayRef(c.box.offsets),
                               " has no item in storage_data"));
      }
      c.location = found->second;
      tensor.chunks.push_back(std::move(c));
    }
    metadata.tensors[key] = std::move(tensor);
  }
  if (PyRef planner = fields.get("planner_data"); planner && planner->kind == Kind::kDict) {
    for (const auto& [key, value] : planner->entries) {
      const std::string name = text(*key, "a key of planner_data");
      metadata.paths[name] = path(*value, name);
    }
  }
  return metadata;
}

}  // namespace

int64_t DcpBox::numel() const {
  int64_t n = 1;
  for (int64_t s : sizes) n *= s;
  return n;
}

bool DcpBox::inside(const std::vector<int64_t>& size) const {
  bool fits = offsets.size() == size.size() && sizes.size() == size.size();
  for (size_t d = 0; fits && d < size.size(); ++d) {
    fits = offsets[d] >= 0 && sizes[d] >= 0 && offsets[d] <= size[d] - sizes[d];
  }
  return fits;
}

DcpMetadata read_dcp_metadata(const std::string& directory) {
  const std::string path = (std::filesystem::path(directory) / kDcpMetadataFile).string();
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw FormatError("cannot read the distributed checkpoint " + directory + ": it has no " +
                      kDcpMetadataFile + " (torch.distributed.checkpoint.save writes it last)");
  }
  const std::string pickle((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const detail::StorageLoader no_storages = [](const std::string&, at::ScalarType,
                                               const std::string&, int64_t) -> at::Tensor {
    throw FormatError("a persistent id in .metadata, which holds no storages");
  };
  const PyRef root = detail::read_pickle(path, kDcpMetadataFile, pickle, no_storages);
  return MetadataParser(path).parse(*root);
}

}  // namespace ddp::formats

// write_dcp_metadata (ddp/formats/dcp.hpp): the pickle Python's
// FileSystemWriter.finish() dumps, the dataclasses of
// torch.distributed.checkpoint written as Python's pickle writes them
// (NEWOBJ of the class, BUILD with its fields), so that pickle.load builds
// the same objects.

#include <c10/util/ArrayRef.h>

#include <filesystem>
#include <functional>
#include <utility>

#include "base/str.hpp"
#include "ddp/formats/dcp.hpp"
#include "ddp/formats/errors.hpp"
#include "formats/atomic_file.hpp"
#include "formats/pickle_writer.hpp"

namespace ddp::formats {
namespace {

using detail::kDcpMetadataModule;
using detail::PickleOp;

class MetadataPickler final : public detail::PickleWriter {
 public:
  using Fields = std::vector<std::pair<const char*, std::function<void()>>>;

  // A dataclass instance: cls.__new__(cls), then its fields as its state.
  void dataclass(const char* module, const char* cls, const Fields& fields) {
    global(module, cls);
    op(PickleOp::kEmptyTuple);
    op(PickleOp::kNewObj);
    op(PickleOp::kEmptyDict);
    op(PickleOp::kMark);
    for (const auto& [name, write] : fields) {
      string(name);
      write();
    }
    op(PickleOp::kSetItems);
    op(PickleOp::kBuild);
  }
  void size(const std::vector<int64_t>& dims) {  // torch.Size(dims)
    global("torch", "Size");
    tuple_of(dims);
    op(PickleOp::kTuple1);
    op(PickleOp::kReduce);
  }
  // TensorProperties pickles its state as (dtype, layout, requires_grad,
  // memory format encoding, pin_memory).
  void properties(at::ScalarType dtype) {
    global(kDcpMetadataModule, "TensorProperties");
    op(PickleOp::kEmptyTuple);
    op(PickleOp::kNewObj);
    op(PickleOp::kMark);
    global("torch", dtype_name(dtype));
    global("torch.serialization", "_get_layout");
    string("torch.strided");
    op(PickleOp::kTuple1);
    op(PickleOp::kReduce);
    op(PickleOp::kNewFalse);
    global(kDcpMetadataModule, "_MEM_FORMAT_ENCODING");
    integer(0);  // TORCH_CONTIGUOUS_FORMAT
    op(PickleOp::kTuple1);
    op(PickleOp::kReduce);
    op(PickleOp::kNewFalse);
    op(PickleOp::kTuple);
    op(PickleOp::kBuild);
  }
  void index(const DcpItem& item) {  // MetadataIndex(fqn, offset, index)
    dataclass(kDcpMetadataModule, "MetadataIndex",
              {{"fqn", [&] { string(item.key); }},
               {"offset", [&] { item.is_tensor ? size(item.box.offsets) : op(PickleOp::kNone); }},
               {"index", [&] { op(PickleOp::kNone); }}});
  }
  void location(const DcpLocation& at) {
    dataclass(detail::kDcpFilesystemModule, "_StorageInfo",
              {{"relative_path", [&] { string(at.file); }},
               {"offset", [&] { integer(static_cast<int64_t>(at.offset)); }},
               {"length", [&] { integer(static_cast<int64_t>(at.length)); }}});
  }

 private:
  static std::string dtype_name(at::ScalarType dtype) {
    for (const auto& [name, scalar] : detail::dtype_names()) {
      if (scalar == dtype) return name;
    }
    throw FormatError(std::string("cannot save a tensor of dtype ") + c10::toString(dtype) +
                      " in a distributed checkpoint");
  }
};

}  // namespace

void write_dcp_metadata(const std::string& directory, const std::vector<DcpItem>& items,
                        const std::map<std::string, std::vector<PyRef>>& paths) {
  // Each key once, in the order first written; a tensor's items agree.
  std::vector<std::string> keys;
  std::map<std::string, std::vector<const DcpItem*>> by_key;
  for (const DcpItem& item : items) {
    auto& same = by_key[item.key];
    if (same.empty()) keys.push_back(item.key);
    if (!same.empty() &&
        (same[0]->is_tensor != item.is_tensor ||
         (item.is_tensor && (same[0]->dtype != item.dtype || same[0]->size != item.size)))) {
      throw FormatError(base::detail::str(
          "cannot write the distributed checkpoint ", directory, ": the items of ", item.key,
          " disagree (", same[0]->dtype, " ", c10::IntArrayRef(same[0]->size), " and ", item.dtype,
          " ", c10::IntArrayRef(item.size), ")"));
    }
    // A chunk, or a value, saved twice (by several ranks) is listed once.
    bool known = false;
    for (const DcpItem* other : same) known = known || other->box.offsets == item.box.offsets;
    if (!known) same.push_back(&item);
  }
  MetadataPickler p;
  p.proto(2);
  p.dataclass(kDcpMetadataModule, "Metadata",
              {{"state_dict_metadata",
                [&] {
                  p.op(PickleOp::kEmptyDict);
                  for (const std::string& key : keys) {
                    const auto& same = by_key[key];
                    p.string(key);
                    if (!same[0]->is_tensor) {
                      p.dataclass(kDcpMetadataModule, "BytesStorageMetadata", {});
                    } else {
                      p.dataclass(kDcpMetadataModule, "TensorStorageMetadata",
                                  {{"properties", [&] { p.properties(same[0]->dtype); }},
                                   {"size", [&] { p.size(same[0]->size); }},
                                   {"chunks", [&] {
                                      p.op(PickleOp::kEmptyList);
                                      for (const DcpItem* item : same) {
                                        p.dataclass(
                                            kDcpMetadataModule, "ChunkStorageMetadata",
                                            {{"offsets", [&] { p.size(item->box.offsets); }},
                                             {"sizes", [&] { p.size(item->box.sizes); }}});
                                        p.op(PickleOp::kAppend);
                                      }
                                    }}});
                    }
                    p.op(PickleOp::kSetItem);
                  }
                }},
               {"planner_data",
                [&] {
                  p.op(PickleOp::kEmptyDict);
                  for (const auto& [key, path] : paths) {
                    p.string(key);
                    p.value(*PyValue::tuple(path));
                    p.op(PickleOp::kSetItem);
                  }
                }},
               {"storage_data",
                [&] {
                  p.op(PickleOp::kEmptyDict);
                  for (const std::string& key : keys) {
                    for (const DcpItem* item : by_key[key]) {
                      p.index(*item);
                      p.location(item->location);
                      p.op(PickleOp::kSetItem);
                    }
                  }
                }},
               {"storage_meta", [&] { p.op(PickleOp::kNone); }}});
  p.op(PickleOp::kStop);
  const std::string path = (std::filesystem::path(directory) / kDcpMetadataFile).string();
  detail::write_atomically(path, "the distributed checkpoint's metadata",
                           [&](const detail::ByteSink& sink) {
                             if (sink(p.bytes().data(), p.bytes().size()) != p.bytes().size()) {
                               throw FormatError("cannot write " + path);
                             }
                           });
}

}  // namespace ddp::formats

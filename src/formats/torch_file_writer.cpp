// write_torch_file: a pickle of the subset (Note [The pickle subset ddp
// speaks]) in a zip archive laid out as torch.save lays it out.

#include <ATen/ATen.h>
#include <caffe2/serialize/inline_container.h>

#include <cstring>

#include "ddp/formats/errors.hpp"
#include "ddp/formats/torch_file.hpp"
#include "formats/atomic_file.hpp"
#include "formats/pickle_protocol.hpp"

namespace ddp::formats {
namespace {

using Kind = PyValue::Kind;
using detail::ByteSink;
using detail::kTorchPickleProtocol;
using detail::PickleOp;
using detail::storage_types;

// Python's pickle batches APPENDS and SETITEMS by this many items.
constexpr size_t kPickleBatch = 1000;

const char* storage_type_of(at::ScalarType dtype) {
  for (const auto& [name, type] : storage_types()) {
    if (type == dtype) return name;
  }
  throw FormatError(std::string("cannot export a tensor of dtype ") + c10::toString(dtype) +
                    ": torch.save has no storage class for it");
}

// Pickles one value tree into `out`, collecting the tensors whose storages
// become the archive's data/<index> records.
class TorchPickler {
 public:
  std::string out;
  std::vector<at::Tensor> storages;

  void dump(const PyValue& root) {
    op(PickleOp::kProto);
    out.push_back(static_cast<char>(kTorchPickleProtocol));
    value(root);
    op(PickleOp::kStop);
  }

 private:
  void op(PickleOp code) { out.push_back(static_cast<char>(code)); }
  template <typename T>
  void raw(T number) {  // little-endian, as pickle's fixed-size arguments are
    char bytes[sizeof(T)];
    std::memcpy(bytes, &number, sizeof(T));
    out.append(bytes, sizeof(T));
  }
  void global(const char* module, const char* name) {
    op(PickleOp::kGlobal);
    out.append(module).push_back('\n');
    out.append(name).push_back('\n');
  }
  void string(const std::string& text) {
    op(PickleOp::kBinUnicode);
    raw(static_cast<uint32_t>(text.size()));
    out += text;
  }
  void integer(int64_t number) {
    if (number >= 0 && number < 256) {
      op(PickleOp::kBinInt1);
      out.push_back(static_cast<char>(number));
    } else if (number >= 0 && number < 65536) {
      op(PickleOp::kBinInt2);
      raw(static_cast<uint16_t>(number));
    } else if (number >= INT32_MIN && number <= INT32_MAX) {
      op(PickleOp::kBinInt);
      raw(static_cast<int32_t>(number));
    } else {  // LONG1: little-endian two's complement, 8 bytes suffice
      op(PickleOp::kLong1);
      out.push_back(8);
      raw(number);
    }
  }
  void floating(double number) {  // BINFLOAT's argument is big-endian
    op(PickleOp::kBinFloat);
    uint64_t bits;
    std::memcpy(&bits, &number, sizeof bits);
    for (int shift = 56; shift >= 0; shift -= 8) out.push_back(static_cast<char>(bits >> shift));
  }
  void tuple_of(const std::vector<int64_t>& numbers) {
    std::vector<PyRef> items;
    for (int64_t n : numbers) items.push_back(PyValue::of(n));
    value(*PyValue::tuple(std::move(items)));
  }

  void tensor(const at::Tensor& live) {
    at::Tensor t = live.detach().to(at::kCPU).contiguous();
    if (t.storage_offset() != 0 || t.storage().nbytes() != t.nbytes()) t = t.clone();
    const std::string key = std::to_string(storages.size());
    storages.push_back(t);
    global("torch._utils", "_rebuild_tensor_v2");
    op(PickleOp::kMark);
    op(PickleOp::kMark);  // the persistent id of its storage
    string("storage");
    global("torch", storage_type_of(t.scalar_type()));
    string(key);
    string("cpu");
    integer(t.numel());
    op(PickleOp::kTuple);
    op(PickleOp::kBinPersId);
    integer(0);  // storage offset
    tuple_of(t.sizes().vec());
    tuple_of(t.strides().vec());
    op(PickleOp::kNewFalse);               // requires_grad
    global("collections", "OrderedDict");  // no backward hooks
    op(PickleOp::kEmptyTuple);
    op(PickleOp::kReduce);
    op(PickleOp::kTuple);
    op(PickleOp::kReduce);
  }

  void value(const PyValue& v) {
    switch (v.kind) {
      case Kind::kNone:
        return op(PickleOp::kNone);
      case Kind::kBool:
        return op(v.boolean ? PickleOp::kNewTrue : PickleOp::kNewFalse);
      case Kind::kInt:
        return integer(v.integer);
      case Kind::kFloat:
        return floating(v.floating);
      case Kind::kString:
        return string(v.text);
      case Kind::kTensor:
        return tensor(v.tensor);
      case Kind::kTuple: {
        static const PickleOp kSmall[] = {PickleOp::kEmptyTuple, PickleOp::kTuple1,
                                          PickleOp::kTuple2, PickleOp::kTuple3};
        if (v.items.size() > 3) op(PickleOp::kMark);
        for (const auto& item : v.items) value(*item);
        return op(v.items.size() > 3 ? PickleOp::kTuple : kSmall[v.items.size()]);
      }
      case Kind::kList:
        op(PickleOp::kEmptyList);
        for (size_t start = 0; start < v.items.size(); start += kPickleBatch) {
          op(PickleOp::kMark);
          for (size_t i = start; i < std::min(v.items.size(), start + kPickleBatch); ++i) {
            value(*v.items[i]);
          }
          op(PickleOp::kAppends);
        }
        return;
      case Kind::kDict:
        op(PickleOp::kEmptyDict);
        for (size_t start = 0; start < v.entries.size(); start += kPickleBatch) {
          op(PickleOp::kMark);
          for (size_t i = start; i < std::min(v.entries.size(), start + kPickleBatch); ++i) {
            value(*v.entries[i].first);
            value(*v.entries[i].second);
          }
          op(PickleOp::kSetItems);
        }
        return;
      case Kind::kBytes:
      case Kind::kGlobal:
      case Kind::kObject:
        break;
    }
    throw FormatError("cannot export a value of Python type " + v.type_name() +
                      " into a torch.save file");
  }
};

}  // namespace

void write_torch_file(const std::string& path, const PyValue& root) {
  TorchPickler pickler;
  pickler.dump(root);

  detail::write_atomically(path, "the checkpoint", [&](const ByteSink& sink) {
    caffe2::serialize::PyTorchStreamWriter zip(sink);
    zip.writeRecord("data.pkl", pickler.out.data(), pickler.out.size());
    zip.writeRecord("byteorder", "little", 6);
    for (size_t i = 0; i < pickler.storages.size(); ++i) {
      const at::Tensor& t = pickler.storages[i];
      zip.writeRecord("data/" + std::to_string(i), t.data_ptr(), t.nbytes());
    }
    zip.writeEndOfFile();
  });
}

}  // namespace ddp::formats

// read_torch_file: torch.save's zip archive through LibTorch's
// PyTorchStreamReader, its pickle through the unpickler below, which knows
// only Note [The pickle subset ddp speaks] and calls no code.

#include <ATen/ATen.h>
#include <c10/util/accumulate.h>
#include <caffe2/serialize/inline_container.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "base/str.hpp"
#include "ddp/snapshot/errors.hpp"
#include "snapshot/torch_file.hpp"

namespace ddp::snapshot::detail {
namespace {

using Kind = PyValue::Kind;

class TorchUnpickler {
 public:
  TorchUnpickler(const std::string& path, caffe2::serialize::PyTorchStreamReader& zip,
                 const std::string& pickle)
      : path_(path), zip_(zip), in_(pickle) {}

  PyRef load() {
    while (true) {
      const size_t at = pos_;
      const auto code = static_cast<PickleOp>(u8());
      if (code == PickleOp::kStop) break;
      step(code, at);
    }
    if (stack_.size() != 1) fail(pos_, "the pickle ends with more than one value");
    return stack_.back();
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& what) const {
    throw SnapshotError(base::detail::str("cannot read the checkpoint ", path_, ": ", what,
                                          " (data.pkl byte ", at, ")"));
  }
  const char* take(size_t n) {
    if (in_.size() - pos_ < n) fail(pos_, "the pickle is truncated");
    const char* p = in_.data() + pos_;
    pos_ += n;
    return p;
  }
  uint8_t u8() { return static_cast<uint8_t>(*take(1)); }
  template <typename T>
  T raw() {
    T number;
    std::memcpy(&number, take(sizeof(T)), sizeof(T));
    return number;
  }
  std::string line() {
    const size_t end = in_.find('\n', pos_);
    if (end == std::string::npos) fail(pos_, "the pickle is truncated");
    std::string text = in_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return text;
  }
  PyRef pop(size_t at) {
    if (stack_.empty() || (!marks_.empty() && stack_.size() == marks_.back())) {
      fail(at, "malformed pickle (an empty stack)");
    }
    PyRef top = stack_.back();
    stack_.pop_back();
    return top;
  }
  std::vector<PyRef> pop_to_mark(size_t at) {
    if (marks_.empty()) fail(at, "malformed pickle (no MARK)");
    std::vector<PyRef> items(stack_.begin() + static_cast<std::ptrdiff_t>(marks_.back()),
                             stack_.end());
    stack_.resize(marks_.back());
    marks_.pop_back();
    return items;
  }
  PyRef& top(size_t at) {
    if (stack_.empty()) fail(at, "malformed pickle (an empty stack)");
    return stack_.back();
  }
  PyRef make(Kind kind, std::vector<PyRef> items = {}) {
    auto value = std::make_shared<PyValue>();
    value->kind = kind;
    value->items = std::move(items);
    return value;
  }
  void push(PyRef value) { stack_.push_back(std::move(value)); }
  void push_global(size_t at, const std::string& module, const std::string& name) {
    static const char* const kAllowed[] = {
        "collections.OrderedDict", "torch._utils._rebuild_tensor_v2",
        "torch._utils._rebuild_parameter", "torch._utils._rebuild_parameter_with_state"};
    const std::string full = module + "." + name;
    bool allowed = false;
    for (const char* known : kAllowed) allowed = allowed || full == known;
    if (module == "torch") {
      for (const auto& entry : storage_types()) allowed = allowed || name == entry.first;
    }
    if (!allowed) {
      fail(at, "it refers to the Python global " + full +
                   ", which ddp does not call (a checkpoint ddp reads holds dicts, lists, "
                   "tuples, numbers, strings and tensors only); save plain values instead");
    }
    auto global = make(Kind::kGlobal);
    global->text = full;
    push(global);
  }
  // The storage a persistent id names, as a flat tensor of its dtype.
  PyRef storage(size_t at, const PyValue& id) {
    if (id.kind != Kind::kTuple || id.items.size() != 5 || id.items[0]->text != "storage" ||
        id.items[1]->kind != Kind::kGlobal || id.items[2]->kind != Kind::kString ||
        id.items[4]->kind != Kind::kInt) {
      fail(at, "a persistent id is not ('storage', type, key, location, numel)");
    }
    const std::string& key = id.items[2]->text;
    if (auto found = storages_.find(key); found != storages_.end()) return found->second;
    const std::string type = id.items[1]->text.substr(std::strlen("torch."));
    at::ScalarType dtype = at::kByte;
    for (const auto& [name, scalar] : storage_types()) {
      if (type == name) dtype = scalar;
    }
    const int64_t numel = id.items[4]->integer;
    const std::string record = "data/" + key;
    if (!zip_.hasRecord(record)) fail(at, "the archive has no record " + record);
    auto [data, bytes] = zip_.getRecord(record);
    at::Tensor flat = at::empty({numel}, at::TensorOptions(dtype));
    if (bytes != flat.nbytes()) {
      fail(at, base::detail::str("record ", record, " holds ", bytes, " bytes, its ", type, " of ",
                                 numel, " elements needs ", flat.nbytes()));
    }
    if (bytes > 0) std::memcpy(flat.data_ptr(), data.get(), bytes);
    return storages_[key] = PyValue::of(flat);
  }
  static std::vector<int64_t> numbers(const PyValue& tuple) {
    std::vector<int64_t> result;
    for (const auto& item : tuple.items) result.push_back(item->integer);
    return result;
  }
  PyRef call(size_t at, const PyValue& callable, const PyValue& args) {
    const std::string& name = callable.text;
    if (callable.kind != Kind::kGlobal || args.kind != Kind::kTuple) {
      fail(at, "REDUCE of a " + callable.type_name() + " (only the globals ddp reads are called)");
    }
    if (name == "collections.OrderedDict") {
      if (!args.items.empty()) fail(at, "OrderedDict called with arguments");
      return PyValue::dict();
    }
    if (name == "torch._utils._rebuild_tensor_v2") {
      if (args.items.size() < 6 || args.items[0]->kind != Kind::kTensor) {
        fail(at, "a tensor is not rebuilt from (storage, offset, size, stride, ...)");
      }
      const at::Tensor& flat = args.items[0]->tensor;
      const auto sizes = numbers(*args.items[2]), strides = numbers(*args.items[3]);
      const int64_t offset = args.items[1]->integer;
      int64_t last = offset;
      for (size_t d = 0; d < sizes.size() && d < strides.size(); ++d) {
        if (sizes[d] > 0) last += (sizes[d] - 1) * strides[d];
      }
      if (sizes.size() != strides.size() || offset < 0 ||
          (c10::multiply_integers(sizes) > 0 && last >= flat.numel())) {
        fail(at, "a tensor's sizes, strides and offset reach outside its storage");
      }
      return PyValue::of(flat.as_strided(sizes, strides, offset));
    }
    if (name.rfind("torch._utils._rebuild_parameter", 0) == 0) {
      if (args.items.empty() || args.items[0]->kind != Kind::kTensor) {
        fail(at, "a Parameter is not rebuilt from a tensor");
      }
      return args.items[0];
    }
    fail(at, name + " cannot be called");
  }

  void step(PickleOp code, size_t at) {
    switch (code) {
      case PickleOp::kProto:
        if (u8() > 5) fail(at, "pickle protocol above 5");
        return;
      case PickleOp::kFrame:
        (void)raw<uint64_t>();
        return;
      case PickleOp::kMark:
        marks_.push_back(stack_.size());
        return;
      case PickleOp::kNone:
        return push(PyValue::none());
      case PickleOp::kNewTrue:
      case PickleOp::kNewFalse:
        return push(PyValue::of(code == PickleOp::kNewTrue));
      case PickleOp::kBinInt:
        return push(PyValue::of(static_cast<int64_t>(raw<int32_t>())));
      case PickleOp::kBinInt1:
        return push(PyValue::of(static_cast<int64_t>(u8())));
      case PickleOp::kBinInt2:
        return push(PyValue::of(static_cast<int64_t>(raw<uint16_t>())));
      case PickleOp::kLong1:
      case PickleOp::kLong4: {
        const size_t n = code == PickleOp::kLong1 ? u8() : raw<uint32_t>();
        if (n > 8) fail(at, "an integer wider than 64 bits");
        const char* bytes = take(n);
        uint64_t bits = 0;
        for (size_t i = 0; i < n; ++i) bits |= uint64_t{static_cast<uint8_t>(bytes[i])} << (8 * i);
        if (n > 0 && n < 8 && (bytes[n - 1] & 0x80)) bits |= ~uint64_t{0} << (8 * n);  // sign
        return push(PyValue::of(static_cast<int64_t>(bits)));
      }
      case PickleOp::kBinFloat: {
        const char* bytes = take(8);
        uint64_t bits = 0;
        for (int i = 0; i < 8; ++i) bits = (bits << 8) | static_cast<uint8_t>(bytes[i]);
        double number;
        std::memcpy(&number, &bits, sizeof number);
        return push(PyValue::of(number));
      }
      case PickleOp::kBinUnicode:
      case PickleOp::kShortBinUnicode:
      case PickleOp::kBinUnicode8:
      case PickleOp::kBinBytes:
      case PickleOp::kShortBinBytes: {
        const bool is_short =
            code == PickleOp::kShortBinUnicode || code == PickleOp::kShortBinBytes;
        const size_t n = is_short                         ? u8()
                         : code == PickleOp::kBinUnicode8 ? raw<uint64_t>()
                                                          : raw<uint32_t>();
        auto value = PyValue::of(std::string(take(n), n));
        if (code == PickleOp::kBinBytes || code == PickleOp::kShortBinBytes) {
          value->kind = Kind::kBytes;
        }
        return push(value);
      }
      case PickleOp::kEmptyDict:
        return push(PyValue::dict());
      case PickleOp::kEmptyList:
        return push(PyValue::list());
      case PickleOp::kEmptyTuple:
        return push(PyValue::tuple());
      case PickleOp::kTuple:
        return push(make(Kind::kTuple, pop_to_mark(at)));
      case PickleOp::kTuple1:
      case PickleOp::kTuple2:
      case PickleOp::kTuple3: {
        std::vector<PyRef> items(static_cast<size_t>(code) -
                                 static_cast<size_t>(PickleOp::kTuple1) + 1);
        for (auto it = items.rbegin(); it != items.rend(); ++it) *it = pop(at);
        return push(make(Kind::kTuple, std::move(items)));
      }
      case PickleOp::kAppend:
      case PickleOp::kAppends: {
        std::vector<PyRef> items;
        if (code == PickleOp::kAppend) {
          items.push_back(pop(at));
        } else {
          items = pop_to_mark(at);
        }
        PyRef& list = top(at);
        if (list->kind != Kind::kList) fail(at, "APPEND to a " + list->type_name());
        list->items.insert(list->items.end(), items.begin(), items.end());
        return;
      }
      case PickleOp::kSetItem:
      case PickleOp::kSetItems: {
        std::vector<PyRef> items;
        if (code == PickleOp::kSetItem) {
          PyRef value = pop(at);
          items = {pop(at), value};
        } else {
          items = pop_to_mark(at);
        }
        PyRef& dict = top(at);
        if (dict->kind != Kind::kDict || items.size() % 2 != 0) fail(at, "malformed SETITEMS");
        for (size_t i = 0; i < items.size(); i += 2) dict->set(items[i], items[i + 1]);
        return;
      }
      case PickleOp::kGlobal: {
        std::string module = line();
        return push_global(at, module, line());
      }
      case PickleOp::kStackGlobal: {
        PyRef name = pop(at), module = pop(at);
        return push_global(at, module->text, name->text);
      }
      case PickleOp::kReduce: {
        PyRef args = pop(at), callable = pop(at);
        return push(call(at, *callable, *args));
      }
      case PickleOp::kBuild: {  // an OrderedDict's attributes (state_dict's _metadata)
        PyRef state = pop(at);
        if (top(at)->kind != Kind::kDict) fail(at, "BUILD of a " + top(at)->type_name());
        return;
      }
      case PickleOp::kBinPersId: {
        PyRef id = pop(at);
        return push(storage(at, *id));
      }
      case PickleOp::kBinPut:
        memo_[u8()] = top(at);
        return;
      case PickleOp::kLongBinPut:
        memo_[raw<uint32_t>()] = top(at);
        return;
      case PickleOp::kMemoize:
        memo_[static_cast<uint32_t>(memo_.size())] = top(at);
        return;
      case PickleOp::kBinGet:
      case PickleOp::kLongBinGet: {
        const uint32_t index = code == PickleOp::kBinGet ? u8() : raw<uint32_t>();
        auto found = memo_.find(index);
        if (found == memo_.end()) fail(at, base::detail::str("memo entry ", index, " is unset"));
        return push(found->second);
      }
      default:
        break;
    }
    fail(at, base::detail::str("pickle opcode 0x", std::hex, static_cast<int>(code),
                               " is outside what torch.save writes for a checkpoint"));
  }

  const std::string& path_;
  caffe2::serialize::PyTorchStreamReader& zip_;
  const std::string& in_;
  size_t pos_ = 0;
  std::vector<PyRef> stack_;
  std::vector<size_t> marks_;
  std::map<uint32_t, PyRef> memo_;
  std::map<std::string, PyRef> storages_;
};

}  // namespace

PyRef read_torch_file(const std::string& path) {
  std::ifstream probe(path, std::ios::binary);
  if (!probe) throw SnapshotError("cannot read the checkpoint " + path + ": no such file");
  char magic[2] = {0, 0};
  probe.read(magic, 2);
  if (magic[0] != 'P' || magic[1] != 'K') {
    throw SnapshotError(
        "cannot read the checkpoint " + path +
        (static_cast<uint8_t>(magic[0]) == 0x80
             ? ": it is in torch.save's legacy format (_use_new_zipfile_serialization=False); "
               "load it in Python and save it again with torch.save(obj, path)"
             : ": it is not a zip archive, so not a file torch.save wrote"));
  }
  try {
    caffe2::serialize::PyTorchStreamReader zip(path);
    if (!zip.hasRecord("data.pkl")) {
      throw SnapshotError("cannot read the checkpoint " + path +
                          ": the archive has no data.pkl (a TorchScript module? load it with "
                          "torch::jit::load instead)");
    }
    auto [data, size] = zip.getRecord("data.pkl");
    const std::string pickle(static_cast<const char*>(data.get()), size);
    return TorchUnpickler(path, zip, pickle).load();
  } catch (const c10::Error& e) {
    throw SnapshotError("cannot read the checkpoint " + path + ": " + e.what_without_backtrace());
  }
}

}  // namespace ddp::snapshot::detail

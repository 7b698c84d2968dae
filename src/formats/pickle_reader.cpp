// The unpickler of torch.save's data.pkl (src/formats/pickle_reader.hpp):
// it knows only Note [The pickle subset ddp speaks], calls no code, and
// bounds what a hostile pickle can make it do (Note [A hostile file is an
// error] in ddp/formats/torch_file.hpp).

#include "formats/pickle_reader.hpp"

#include <ATen/ATen.h>

#include <cstring>
#include <map>
#include <memory>
#include <optional>

#include "base/str.hpp"
#include "ddp/formats/errors.hpp"
#include "ddp/formats/torch_file.hpp"
#include "formats/pickle_protocol.hpp"
#include "formats/tree_bounds.hpp"

namespace ddp::formats::detail {
namespace {

using Kind = PyValue::Kind;

// The globals a checkpoint may call: the dict and tensor constructors.
bool callable(const std::string& name) {
  return name == "collections.OrderedDict" || name == "torch._utils._rebuild_tensor_v2" ||
         name == "torch._utils._rebuild_parameter" ||
         name == "torch._utils._rebuild_parameter_with_state";
}

// `offset + sum((sizes[d] - 1) * strides[d])` stays below `numel` without
// overflow: a view of `sizes` and `strides` at `offset` lies inside a
// storage of `numel` elements.
bool view_fits(const std::vector<int64_t>& sizes, const std::vector<int64_t>& strides,
               int64_t offset, int64_t numel) {
  if (sizes.size() != strides.size() || offset < 0) return false;
  int64_t last = offset, elements = 1;
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] < 0 || strides[d] < 0) return false;
    if (__builtin_mul_overflow(elements, sizes[d], &elements)) return false;
    int64_t reach = 0;
    if (sizes[d] > 0 && (__builtin_mul_overflow(sizes[d] - 1, strides[d], &reach) ||
                         __builtin_add_overflow(last, reach, &last))) {
      return false;
    }
  }
  return elements == 0 || last < numel;
}

class TorchUnpickler {
 public:
  TorchUnpickler(const std::string& path, const std::string& record, const std::string& pickle,
                 const StorageLoader& load_storage)
      : path_(path), record_(record), in_(pickle), load_storage_(load_storage) {}
  // A failed or refused load leaves no cycle behind to leak.
  ~TorchUnpickler() {
    if (!finished_) break_cycles();
  }

  PyRef load() {
    while (true) {
      const size_t at = pos_;
      const auto code = static_cast<PickleOp>(u8());
      if (code == PickleOp::kStop) break;
      step(code, at);
    }
    if (stack_.size() != 1 || !marks_.empty()) {
      fail(pos_, "the pickle ends with more than one value");
    }
    const std::string problem = tree_problem(*stack_.back());
    if (!problem.empty()) fail(pos_, problem);
    finished_ = true;
    return stack_.back();
  }

 private:
  [[noreturn]] void fail(size_t at, const std::string& what) const {
    throw FormatError(base::detail::str("cannot read the checkpoint ", path_, ": ", what, " (",
                                        record_, " byte ", at, ")"));
  }
  const char* take(uint64_t n) {
    if (in_.size() - pos_ < n)
      fail(pos_, base::detail::str("the pickle is truncated (", n, " bytes expected)"));
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
    if (end == std::string::npos) fail(pos_, "the pickle is truncated (a line without its end)");
    std::string text = in_.substr(pos_, end - pos_);
    pos_ = end + 1;
    return text;
  }
  size_t floor() const { return marks_.empty() ? 0 : marks_.back(); }
  PyRef pop(size_t at) {
    if (stack_.size() <= floor()) fail(at, "malformed pickle (an empty stack)");
    PyRef top = std::move(stack_.back());
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
    if (stack_.size() <= floor()) fail(at, "malformed pickle (an empty stack)");
    return stack_.back();
  }
  PyRef make(Kind kind, std::vector<PyRef> items = {}) {
    auto value = std::make_shared<PyValue>();
    value->kind = kind;
    value->items = std::move(items);
    containers_.push_back(value);
    return value;
  }
  void push(PyRef value) { stack_.push_back(std::move(value)); }
  void push_global(size_t at, const std::string& module, const std::string& name) {
    if (module == "__torch__" || module.rfind("__torch__.", 0) == 0) {
      fail(at, "it refers to " + module + "." + name +
                   ", a class of a TorchScript module: the file is a TorchScript archive "
                   "(torch.jit.save); load it with torch::jit::load instead");
    }
    auto global = make(Kind::kGlobal);
    global->text = module + "." + name;
    push(global);
  }
  // The storage a persistent id names, as a flat tensor of its dtype,
  // from the loader; each key once.
  PyRef storage(size_t at, const PyValue& id) {
    if (id.kind != Kind::kTuple || id.items.size() != 5 || id.items[0]->kind != Kind::kString ||
        id.items[0]->text != "storage" || id.items[1]->kind != Kind::kGlobal ||
        id.items[2]->kind != Kind::kString || id.items[4]->kind != Kind::kInt) {
      fail(at, "a persistent id is not ('storage', type, key, location, numel)");
    }
    const std::string& key = id.items[2]->text;
    if (auto found = storages_.find(key); found != storages_.end()) return found->second;
    const std::string& type = id.items[1]->text;
    std::optional<at::ScalarType> dtype;
    for (const auto& [name, scalar] : storage_types()) {
      if (type == std::string("torch.") + name) dtype = scalar;
    }
    if (!dtype) fail(at, "a persistent id names " + type + ", which is not a torch storage class");
    const int64_t numel = id.items[4]->integer;
    if (numel < 0) fail(at, base::detail::str("storage ", key, " has a negative count, ", numel));
    try {
      return storages_[key] = PyValue::of(load_storage_(key, *dtype, type, numel));
    } catch (const FormatError& e) {
      fail(at, e.what());
    }
  }
  std::vector<int64_t> numbers(size_t at, const PyValue& tuple, const char* what) const {
    if (tuple.kind != Kind::kTuple) fail(at, std::string("a tensor's ") + what + " is not a tuple");
    std::vector<int64_t> result;
    for (const auto& item : tuple.items) {
      if (item->kind != Kind::kInt)
        fail(at, std::string("a tensor's ") + what + " holds a " + item->type_name());
      result.push_back(item->integer);
    }
    return result;
  }
  // An instance of a class nothing here constructs: kept as data, never run.
  PyRef object(const PyValue& cls, std::vector<PyRef> arguments) {
    PyRef value = make(Kind::kObject, std::move(arguments));
    value->text = cls.text;
    return value;
  }
  PyRef call(size_t at, const PyValue& callable_value, const PyValue& args) {
    if (callable_value.kind != Kind::kGlobal || args.kind != Kind::kTuple) {
      fail(at, "REDUCE of a " + callable_value.type_name() + " with a " + args.type_name());
    }
    const std::string& name = callable_value.text;
    if (!callable(name)) return object(callable_value, args.items);
    if (name == "collections.OrderedDict") {
      if (!args.items.empty()) fail(at, "OrderedDict called with arguments");
      return make(Kind::kDict);
    }
    if (name == "torch._utils._rebuild_tensor_v2") {
      if (args.items.size() < 6 || args.items[0]->kind != Kind::kTensor ||
          args.items[1]->kind != Kind::kInt) {
        fail(at, "a tensor is not rebuilt from (storage, offset, size, stride, ...)");
      }
      const at::Tensor& flat = args.items[0]->tensor;
      const auto sizes = numbers(at, *args.items[2], "size"),
                 strides = numbers(at, *args.items[3], "stride");
      const int64_t offset = args.items[1]->integer;
      if (!view_fits(sizes, strides, offset, flat.numel())) {
        fail(at, base::detail::str("a tensor's sizes ", c10::IntArrayRef(sizes), ", strides ",
                                   c10::IntArrayRef(strides), " and offset ", offset,
                                   " reach outside its storage of ", flat.numel(), " elements"));
      }
      return PyValue::of(flat.as_strided(sizes, strides, offset));
    }
    if (args.items.empty() || args.items[0]->kind != Kind::kTensor) {
      fail(at, "a Parameter is not rebuilt from a tensor");
    }
    return args.items[0];  // torch._utils._rebuild_parameter*
  }

  void step(PickleOp code, size_t at);

  // Empties every container this load made, so that no cycle outlives it.
  void break_cycles() {
    for (const auto& weak : containers_) {
      if (PyRef value = weak.lock()) value->items.clear(), value->entries.clear();
    }
  }

  const std::string& path_;
  const std::string& record_;
  const std::string& in_;
  const StorageLoader& load_storage_;
  size_t pos_ = 0;
  bool finished_ = false;
  std::vector<PyRef> stack_;
  std::vector<size_t> marks_;
  std::map<uint32_t, PyRef> memo_;
  std::map<std::string, PyRef> storages_;
  std::vector<std::weak_ptr<PyValue>> containers_;
};

void TorchUnpickler::step(PickleOp code, size_t at) {
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
      const uint64_t n = code == PickleOp::kLong1 ? u8() : raw<uint32_t>();
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
      const bool is_short = code == PickleOp::kShortBinUnicode || code == PickleOp::kShortBinBytes;
      const uint64_t n = is_short                         ? u8()
                         : code == PickleOp::kBinUnicode8 ? raw<uint64_t>()
                                                          : raw<uint32_t>();
      const char* text = take(n);  // checked against the pickle before any copy
      auto value = PyValue::of(std::string(text, n));
      if (code == PickleOp::kBinBytes || code == PickleOp::kShortBinBytes) {
        value->kind = Kind::kBytes;
      }
      return push(value);
    }
    case PickleOp::kEmptyDict:
      return push(make(Kind::kDict));
    case PickleOp::kEmptyList:
      return push(make(Kind::kList));
    case PickleOp::kEmptyTuple:
      return push(make(Kind::kTuple));
    case PickleOp::kTuple:
      return push(make(Kind::kTuple, pop_to_mark(at)));
    case PickleOp::kTuple1:
    case PickleOp::kTuple2:
    case PickleOp::kTuple3: {
      std::vector<PyRef> items(static_cast<size_t>(code) - static_cast<size_t>(PickleOp::kTuple1) +
                               1);
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
      if (name->kind != Kind::kString || module->kind != Kind::kString) {
        fail(at, "STACK_GLOBAL of a " + module->type_name() + " and a " + name->type_name());
      }
      return push_global(at, module->text, name->text);
    }
    case PickleOp::kReduce: {
      PyRef args = pop(at), callable_value = pop(at);
      return push(call(at, *callable_value, *args));
    }
    case PickleOp::kNewObj: {  // cls.__new__(cls, *args): an object, never constructed
      PyRef args = pop(at), cls = pop(at);
      if (cls->kind != Kind::kGlobal || args->kind != Kind::kTuple) {
        fail(at, "NEWOBJ of a " + cls->type_name() + " with a " + args->type_name());
      }
      if (cls->text == "collections.OrderedDict") return push(make(Kind::kDict));
      return push(object(*cls, args->items));
    }
    case PickleOp::kBuild: {  // an OrderedDict's _metadata, or an object's state
      PyRef state = pop(at);
      PyRef& target = top(at);
      if (target->kind == Kind::kObject) {
        target->items.push_back(std::move(state));
      } else if (target->kind != Kind::kDict) {
        fail(at, "BUILD of a " + target->type_name());
      }
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

}  // namespace

PyRef read_pickle(const std::string& path, const std::string& record, const std::string& pickle,
                  const StorageLoader& load_storage) {
  return TorchUnpickler(path, record, pickle, load_storage).load();
}

}  // namespace ddp::formats::detail

#pragma once

// Internal: the part of Python's pickle protocol that torch.save uses, named
// once for its writer and its reader (src/snapshot/torch_file_writer.cpp,
// src/snapshot/torch_file_reader.cpp), and the value tree both work on.
//
// Note [The pickle subset ddp speaks]
// torch.save writes pickle protocol 2 (torch.serialization.DEFAULT_PROTOCOL)
// into `<archive>/data.pkl` of a zip file, each tensor's storage into
// `<archive>/data/<key>`. A checkpoint is dicts (OrderedDicts), lists,
// tuples, None, booleans, integers, floats, strings and tensors, and a tensor
// is a call of torch._utils._rebuild_tensor_v2 on a storage named by a
// persistent id ('storage', torch.<Type>Storage, key, location, numel),
// an offset, sizes, strides, requires_grad and an empty OrderedDict of
// hooks. ddp writes exactly that and reads that plus the opcodes of
// protocols 3 to 5 Python also emits for it (FRAME, MEMOIZE,
// SHORT_BINUNICODE, STACK_GLOBAL). Like torch.load's weights_only mode, the
// reader calls no code: a global outside this list is a named error, never
// an import.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ddp::snapshot::detail {

/// The opcodes ddp writes or reads (Python's Lib/pickle.py names them).
enum class PickleOp : uint8_t {
  kMark = '(',
  kStop = '.',
  kBinFloat = 'G',
  kBinInt = 'J',
  kBinInt1 = 'K',
  kBinInt2 = 'M',
  kNone = 'N',
  kBinPersId = 'Q',
  kReduce = 'R',
  kBinUnicode = 'X',
  kAppend = 'a',
  kBuild = 'b',
  kGlobal = 'c',
  kAppends = 'e',
  kBinGet = 'h',
  kLongBinGet = 'j',
  kBinPut = 'q',
  kLongBinPut = 'r',
  kSetItem = 's',
  kTuple = 't',
  kSetItems = 'u',
  kEmptyDict = '}',
  kEmptyList = ']',
  kEmptyTuple = ')',
  kBinBytes = 'B',
  kShortBinBytes = 'C',
  kProto = 0x80,
  kNewObj = 0x81,
  kTuple1 = 0x85,
  kTuple2 = 0x86,
  kTuple3 = 0x87,
  kNewTrue = 0x88,
  kNewFalse = 0x89,
  kLong1 = 0x8a,
  kLong4 = 0x8b,
  kShortBinUnicode = 0x8c,
  kBinUnicode8 = 0x8d,
  kStackGlobal = 0x93,
  kMemoize = 0x94,
  kFrame = 0x95,
};

/// The protocol torch.save writes and ddp writes.
inline constexpr uint8_t kTorchPickleProtocol = 2;

/// The storage classes a persistent id names, by the dtype they hold
/// (torch.FloatStorage holds float32, ...).
inline const std::vector<std::pair<const char*, at::ScalarType>>& storage_types() {
  static const std::vector<std::pair<const char*, at::ScalarType>> kTypes = {
      {"FloatStorage", at::kFloat},
      {"DoubleStorage", at::kDouble},
      {"HalfStorage", at::kHalf},
      {"BFloat16Storage", at::kBFloat16},
      {"LongStorage", at::kLong},
      {"IntStorage", at::kInt},
      {"ShortStorage", at::kShort},
      {"CharStorage", at::kChar},
      {"ByteStorage", at::kByte},
      {"BoolStorage", at::kBool},
      {"ComplexFloatStorage", at::kComplexFloat},
      {"ComplexDoubleStorage", at::kComplexDouble},
      {"UntypedStorage", at::kByte}};
  return kTypes;
}

struct PyValue;
using PyRef = std::shared_ptr<PyValue>;

/// One value of a checkpoint's object tree. Containers hold shared
/// references, as Python's memo shares objects.
struct PyValue {
  /// kGlobal is the reader's intermediate for a callable GLOBAL named
  /// (`text` is "module.name"); a finished tree never holds one.
  enum class Kind {
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kBytes,
    kTensor,
    kList,
    kTuple,
    kDict,
    kGlobal
  };
  Kind kind = Kind::kNone;
  bool boolean = false;
  int64_t integer = 0;
  double floating = 0.0;
  std::string text;  ///< kString (UTF-8) and kBytes.
  at::Tensor tensor;
  std::vector<PyRef> items;                      ///< kList and kTuple.
  std::vector<std::pair<PyRef, PyRef>> entries;  ///< kDict, in insertion order.

  static PyRef none() { return std::make_shared<PyValue>(); }
  static PyRef of(bool value) {
    return make(Kind::kBool, [&](PyValue& v) { v.boolean = value; });
  }
  static PyRef of(int64_t value) {
    return make(Kind::kInt, [&](PyValue& v) { v.integer = value; });
  }
  static PyRef of(double value) {
    return make(Kind::kFloat, [&](PyValue& v) { v.floating = value; });
  }
  static PyRef of(std::string value) {
    return make(Kind::kString, [&](PyValue& v) { v.text = std::move(value); });
  }
  static PyRef of(const char* value) { return of(std::string(value)); }
  static PyRef of(at::Tensor value) {
    return make(Kind::kTensor, [&](PyValue& v) { v.tensor = std::move(value); });
  }
  static PyRef list(std::vector<PyRef> items = {}) {
    return make(Kind::kList, [&](PyValue& v) { v.items = std::move(items); });
  }
  static PyRef tuple(std::vector<PyRef> items = {}) {
    return make(Kind::kTuple, [&](PyValue& v) { v.items = std::move(items); });
  }
  static PyRef dict() {
    return make(Kind::kDict, [](PyValue&) {});
  }

  /// Appends `key: value` to a kDict.
  void set(PyRef key, PyRef value) { entries.emplace_back(std::move(key), std::move(value)); }
  void set(const std::string& key, PyRef value) { set(of(key), std::move(value)); }
  /// The value of the string key `key` of a kDict, or null.
  PyRef get(const std::string& key) const {
    for (const auto& [k, v] : entries) {
      if (k->kind == Kind::kString && k->text == key) return v;
    }
    return nullptr;
  }
  /// "dict", "Tensor", ...: the kind as Python names its type, for messages.
  std::string type_name() const {
    static const char* const kNames[] = {"None",   "bool", "int",   "float", "str",   "bytes",
                                         "Tensor", "list", "tuple", "dict",  "global"};
    return kNames[static_cast<int>(kind)];
  }

 private:
  template <typename Fill>
  static PyRef make(Kind kind, Fill fill) {
    auto value = std::make_shared<PyValue>();
    value->kind = kind;
    fill(*value);
    return value;
  }
};

}  // namespace ddp::snapshot::detail

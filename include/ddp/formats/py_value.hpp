#pragma once

/// \file py_value.hpp
/// The value tree of a torch.save file: what read_torch_file() returns and
/// write_torch_file() writes (ddp/formats/torch_file.hpp), a checkpoint's
/// dicts, lists, tuples, numbers, strings and tensors as Python holds them.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace ddp::formats {

struct PyValue;
using PyRef = std::shared_ptr<PyValue>;

/// One value of a checkpoint's object tree. Containers hold shared
/// references, as Python's memo shares objects; read_torch_file() never
/// returns a tree with a cycle.
///
/// Note [A value tree freed without recursion]
/// A pickle of 200 KB can nest lists 200,000 deep (Python's torch.load
/// reads it). Freed by the shared pointers' own destructors, such a tree
/// recurses once per level and overflows the stack; ~PyValue() therefore
/// moves the children it alone owns into a list and frees them one at a
/// time, so any tree is freed in constant stack.
struct PyValue {
  /// kGlobal is a Python global the file names (`text` is "module.name"),
  /// never imported. kObject is an instance of a class the reader does not
  /// construct (argparse.Namespace in a training script's `args`, a
  /// pickled module): `text` names the class, `items` holds the arguments
  /// and state the file gives it. Nothing in a file is ever called but the
  /// few constructors of Note [The pickle subset ddp speaks].
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
    kGlobal,
    kObject
  };
  Kind kind = Kind::kNone;
  bool boolean = false;
  int64_t integer = 0;
  double floating = 0.0;
  std::string text;  ///< kString (UTF-8) and kBytes.
  at::Tensor tensor;
  std::vector<PyRef> items;                      ///< kList and kTuple.
  std::vector<std::pair<PyRef, PyRef>> entries;  ///< kDict, in insertion order.

  PyValue() = default;
  PyValue(const PyValue&) = default;
  PyValue(PyValue&&) = default;
  PyValue& operator=(const PyValue&) = default;
  PyValue& operator=(PyValue&&) = default;
  /// Frees the children without recursion (Note [A value tree freed
  /// without recursion]).
  ~PyValue();

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
  /// "dict", "Tensor", ...: the kind as Python names its type, for
  /// messages; "argparse.Namespace object" for a kObject, "global
  /// os.system" for a kGlobal.
  std::string type_name() const {
    static const char* const kNames[] = {"None",   "bool", "int",   "float", "str", "bytes",
                                         "Tensor", "list", "tuple", "dict",  "",    ""};
    if (kind == Kind::kObject) return text + " object";
    if (kind == Kind::kGlobal) return "global " + text;
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

}  // namespace ddp::formats

#pragma once

// Internal: the part of Python's pickle protocol that torch.save uses, named
// once for its writer and its reader (src/formats/torch_file_writer.cpp,
// src/formats/torch_file_reader.cpp), which work on the value tree of
// ddp/formats/py_value.hpp.
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

#include <ATen/core/ScalarType.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace ddp::formats::detail {

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

/// The modules of the dataclasses a DCP checkpoint's .metadata pickles
/// (Note [The DCP subset ddp speaks] in ddp/formats/dcp.hpp).
inline constexpr const char* kDcpMetadataModule = "torch.distributed.checkpoint.metadata";
inline constexpr const char* kDcpFilesystemModule = "torch.distributed.checkpoint.filesystem";

/// The dtypes by the names Python pickles them under (torch.float32 is the
/// global "torch" "float32").
inline const std::vector<std::pair<const char*, at::ScalarType>>& dtype_names() {
  static const std::vector<std::pair<const char*, at::ScalarType>> kNames = {
      {"float32", at::kFloat},
      {"float64", at::kDouble},
      {"float16", at::kHalf},
      {"bfloat16", at::kBFloat16},
      {"int64", at::kLong},
      {"int32", at::kInt},
      {"int16", at::kShort},
      {"int8", at::kChar},
      {"uint8", at::kByte},
      {"bool", at::kBool},
      {"complex64", at::kComplexFloat},
      {"complex128", at::kComplexDouble}};
  return kNames;
}

}  // namespace ddp::formats::detail
